package tenants_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"tollgate/tenants"
)

// TestAuditChangesBound: a record past the size bound loses the updated objects' fields
// first, then objects from the ends of its lists, says it was cut, and fits.
func TestAuditChangesBound(t *testing.T) {
	c := &tenants.AuditChanges{}
	for i := range 2000 {
		name := fmt.Sprintf("route-%04d", i)
		c.Created = append(c.Created, tenants.ConfigChange{Kind: "route", Name: name})
		c.Updated = append(c.Updated, tenants.ObjectChange{Kind: "route", Name: name,
			Fields: map[string]tenants.FieldChange{"name": {Before: json.RawMessage(`"a"`), After: json.RawMessage(`"b"`)}}})
	}
	c.Bound()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > tenants.MaxAuditChangesBytes || !c.Truncated || len(c.Created) == 0 || c.Created[0].Name != "route-0000" {
		t.Fatalf("bounded to %d bytes, truncated %v, %d created", len(b), c.Truncated, len(c.Created))
	}
	for _, u := range c.Updated {
		if u.Fields != nil {
			t.Fatalf("updated %s kept its fields", u.Name)
		}
	}

	small := &tenants.AuditChanges{Fields: tenants.DiffFields(&tenants.Quota{Requests: 1}, &tenants.Quota{Requests: 2})}
	small.Bound()
	if small.Truncated || string(small.Fields["requests"].After) != "2" {
		t.Fatalf("a small record was cut: %+v", small)
	}
}

// TestDiffFieldsRedacts: secrets are marked changed and never carry a value, whatever
// their place in the object.
func TestDiffFieldsRedacts(t *testing.T) {
	type inner struct {
		Token string `json:"token"`
		Name  string `json:"name"`
	}
	type obj struct {
		HS256Secret string `json:"hs256_secret"`
		PrivateKey  string `json:"private_key_pem"`
		Inner       inner  `json:"inner"`
	}
	d := tenants.DiffFields(&obj{"old-s", "old-k", inner{"old-t", "a"}}, &obj{"new-s", "new-k", inner{"new-t", "b"}})
	b, _ := json.Marshal(d)
	if strings.Contains(string(b), "old-") || strings.Contains(string(b), "new-") || !d["hs256_secret"].Redacted || !d["inner.token"].Redacted || string(d["inner.name"].After) != `"b"` {
		t.Fatalf("diff %s", b)
	}
	if tenants.DiffFields(&obj{Inner: inner{Name: "x"}}, &obj{Inner: inner{Name: "x"}}) != nil {
		t.Fatal("equal objects differ")
	}
}
