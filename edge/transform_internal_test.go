package edge

import (
	"encoding/json"
	"testing"

	"github.com/tidwall/gjson"

	"tollgate/tenants"
)

// FuzzJSONTransform: any body either is refused or comes out as valid JSON.
func FuzzJSONTransform(f *testing.F) {
	tr := compileTransform(&tenants.Transform{Request: &tenants.RequestTransform{JSON: &tenants.JSONTransform{
		Set:    map[string]json.RawMessage{"a.b": json.RawMessage(`{"x":[1]}`), "list.0": json.RawMessage(`"first"`)},
		Remove: []string{"secret", "deep.er.key"},
		Rename: map[string]string{"old": "new.inner"},
	}}})
	for _, s := range []string{`{}`, `{"a":1}`, `{"a":{"b":2},"secret":"s","old":[1,2]}`, `{"list":[9,8]}`, `[1]`, `{"a":`, `"x"`, `{"a":"\u00e9"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		in := append([]byte(nil), body...)
		out, r := tr.json.apply(body)
		if string(in) != string(body) {
			t.Fatalf("the input was modified")
		}
		if r == nil && !gjson.ValidBytes(out) {
			t.Fatalf("invalid output %q from %q", out, body)
		}
	})
}

func TestRewritePath(t *testing.T) {
	for _, c := range []struct{ from, to, in, want string }{
		{"/v1", "/v2", "/v1/a", "/v2/a"},
		{"/v1", "/v2", "/v1", "/v2"},
		{"/v1", "/v2", "/v10", "/v10"},
		{"/v1", "/", "/v1/a", "/a"},
		{"/v1", "/", "/v1", "/"},
		{"/", "/api", "/a/b", "/api/a/b"},
		{"/v1/", "/v2/", "/v1/a", "/v2/a"},
	} {
		tr := compileTransform(&tenants.Transform{Request: &tenants.RequestTransform{Path: &tenants.PathTransform{
			Prefix: &tenants.PrefixRewrite{From: c.from, To: c.to}}}})
		var buf []byte
		if got := string(tr.rewritePath([]byte(c.in), &buf)); got != c.want {
			t.Errorf("%s→%s on %s: %s, want %s", c.from, c.to, c.in, got, c.want)
		}
	}
}

// BenchmarkJSONTransform is S3's rewrite (tools/bench) on a body of about 1 KB.
func BenchmarkJSONTransform(b *testing.B) {
	tr := compileTransform(&tenants.Transform{Request: &tenants.RequestTransform{JSON: &tenants.JSONTransform{
		Set:    map[string]json.RawMessage{"meta.via": json.RawMessage(`"tollgate"`), "meta.version": json.RawMessage(`2`)},
		Remove: []string{"password"},
		Rename: map[string]string{"user": "login"},
	}}})
	item := `{"sku":"SKU-001000","qty":1,"price":9.99,"note":"gift wrap, deliver to the side door"}`
	body := []byte(`{"user":"ann","password":"s3cret-s3cret","order_id":"ord_7f3a9c2e41b8","currency":"EUR","items":[` +
		item + "," + item + "," + item + "," + item + "," + item + "," + item + "," + item + "," + item +
		`],"shipping":{"street":"1 Main Street","city":"Utrecht","zip":"3511"}}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, r := tr.json.apply(body); r != nil {
			b.Fatal(r)
		}
	}
}
