package transform

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/tidwall/gjson"

	"tollgate/tenants"
)

// FuzzJSONTransform: any body either is refused or comes out as valid JSON, and the
// one-pass editor gives sjson's document (up to the spaces it leaves out) for each of a
// few rewrites.
func FuzzJSONTransform(f *testing.F) {
	rewrites := []*tenants.JSONTransform{{
		Set:    map[string]json.RawMessage{"a.b": json.RawMessage(`{"x":[1]}`), "list.0": json.RawMessage(`"first"`)},
		Remove: []string{"secret", "deep.er.key"},
		Rename: map[string]string{"old": "new.inner"},
	}, {
		Set:    map[string]json.RawMessage{"a.b": json.RawMessage(`{"x":[1]}`), "a.c": json.RawMessage(` 2 `), "z": json.RawMessage(`null`)},
		Remove: []string{"secret", "deep.er.key", "a.q"},
		Rename: map[string]string{"old": "new.inner", "a.r": "s", "t.u": "a.v"},
	}, {
		Set:    map[string]json.RawMessage{"meta.via": json.RawMessage(`"tollgate"`), "meta.version": json.RawMessage(`2`)},
		Remove: []string{"password"},
		Rename: map[string]string{"user": "login"},
	}}
	var trs []*Transform
	for _, j := range rewrites {
		trs = append(trs, Compile(&tenants.Transform{Request: &tenants.RequestTransform{JSON: j}}))
	}
	for _, s := range []string{`{}`, `{"a":1}`, `{"a":{"b":2},"secret":"s","old":[1,2]}`, `{"list":[9,8]}`, `[1]`, `{"a":`, `"x"`, `{"a":"\u00e9"}`,
		` { "a" : { "q" : 1 , "r" : [ ] } , "t" : { "u" : "v" } } `, `{"a":{"b":1,"b":2}}`, `{"a\u0062":1,"old":2}`, `{"user":"ann","password":"p","meta":{}}`,
		`{"deep":{"er":{"key":1,"k":2}},"old":{"x":"}"},"new":{"inner":0}}`, `{"a":"str","old":1}`, `{"t":[1],"old":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		in := append([]byte(nil), body...)
		for _, tr := range trs {
			out, ed, r := tr.JSON.Apply(body)
			if string(in) != string(body) {
				t.Fatalf("the input was modified")
			}
			if r != OK {
				ed.Release()
				continue
			}
			if !gjson.ValidBytes(out) {
				t.Fatalf("invalid output %q from %q", out, body)
			}
			want, wr := tr.JSON.applySJSON(body)
			if wr != OK {
				t.Fatalf("one pass took %q, sjson refused it: %v", body, wr)
			}
			var a, b bytes.Buffer
			if json.Compact(&a, out) != nil || json.Compact(&b, want) != nil || a.String() != b.String() {
				t.Fatalf("from %q: one pass %q, sjson %q", body, out, want)
			}
			ed.Release()
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
		tr := Compile(&tenants.Transform{Request: &tenants.RequestTransform{Path: &tenants.PathTransform{
			Prefix: &tenants.PrefixRewrite{From: c.from, To: c.to}}}})
		var buf []byte
		if got := string(tr.RewritePath([]byte(c.in), &buf)); got != c.want {
			t.Errorf("%s→%s on %s: %s, want %s", c.from, c.to, c.in, got, c.want)
		}
	}
}

// BenchmarkJSONTransform is S3's rewrite (e2e/bench) on a body of about 1 KB.
func BenchmarkJSONTransform(b *testing.B) {
	tr := Compile(&tenants.Transform{Request: &tenants.RequestTransform{JSON: &tenants.JSONTransform{
		Set:    map[string]json.RawMessage{"meta.via": json.RawMessage(`"tollgate"`), "meta.version": json.RawMessage(`2`)},
		Remove: []string{"password"},
		Rename: map[string]string{"user": "login"},
	}}})
	item := `{"sku":"SKU-001000","qty":1,"price":9.99,"note":"gift wrap, deliver to the side door"}`
	body := []byte(`{"user":"ann","password":"s3cret-s3cret","order_id":"ord_7f3a9c2e41b8","currency":"EUR","items":[` +
		item + "," + item + "," + item + "," + item + "," + item + "," + item + "," + item + "," + item +
		`],"shipping":{"street":"1 Main Street","city":"Utrecht","zip":"3511"}}`)
	for _, onePass := range []bool{true, false} {
		b.Run(fmt.Sprintf("onepass=%v", onePass), func(b *testing.B) {
			SetJSONOnePass(onePass)
			defer SetJSONOnePass(true)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				_, ed, r := tr.JSON.Apply(body)
				if r != OK {
					b.Fatal(r)
				}
				ed.Release()
			}
		})
	}
}

// TestJSONOnePassAllocs: once its pool is warm, the one-pass rewrite allocates nothing,
// and sjson's fallback still serves what the editor leaves to it.
func TestJSONOnePassAllocs(t *testing.T) {
	tr := Compile(&tenants.Transform{Request: &tenants.RequestTransform{JSON: &tenants.JSONTransform{
		Set:    map[string]json.RawMessage{"meta.via": json.RawMessage(`"tollgate"`), "meta.version": json.RawMessage(`2`)},
		Remove: []string{"password"},
		Rename: map[string]string{"user": "login"},
	}}})
	body := []byte(`{"user":"ann","password":"p","items":[{"sku":"A","qty":1}],"shipping":{"city":"Utrecht"}}`)
	const want = `{"items":[{"sku":"A","qty":1}],"shipping":{"city":"Utrecht"},"login":"ann","meta":{"version":2,"via":"tollgate"}}`
	rewrite := func() string {
		out, ed, r := tr.JSON.Apply(body)
		if r != OK {
			t.Fatal(r)
		}
		s := string(out)
		ed.Release()
		return s
	}
	if got := rewrite(); got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	if n := testing.AllocsPerRun(100, func() {
		_, ed, _ := tr.JSON.Apply(body)
		ed.Release()
	}); n != 0 && !raceBuild {
		t.Errorf("%.1f allocations per rewrite, want 0", n)
	}
	// A key present twice where a path walks: sjson's answer, through the fallback.
	dup := []byte(`{"user":"a","user":"b"}`)
	out, ed, r := tr.JSON.Apply(dup)
	want2, _ := tr.JSON.applySJSON(dup)
	if r != OK || string(out) != string(want2) {
		t.Errorf("duplicate keys: %s %v, sjson %s", out, r, want2)
	}
	ed.Release()
}
