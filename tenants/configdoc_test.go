package tenants_test

import (
	"encoding/json"
	"errors"
	"testing"

	"tollgate/tenants"
)

// TestConfigDocumentJSON: a document leaves out the objects' read-only fields, writes an
// empty list as [] and leaves out a list it does not manage.
func TestConfigDocumentJSON(t *testing.T) {
	doc := tenants.ConfigDocument{
		Version:   tenants.ConfigDocumentVersion,
		Tenant:    "acme",
		Consumers: []*tenants.Consumer{{ID: "c1", TenantID: "t1", Name: "alice", Version: 3}},
		Plans:     []*tenants.ConsumerPlan{},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"version":1,"tenant":"acme","consumers":[{"name":"alice"}],"plans":[]}`; string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
}

// TestConfigAtPath: an error's field is placed under the object's path in the document.
func TestConfigAtPath(t *testing.T) {
	for _, c := range []struct {
		err  *tenants.Error
		want string
	}{
		{tenants.Invalid("upstream.targets[0].url", "bad"), "routes[3].upstream.targets[0].url"},
		{tenants.Invalid("[1]", "bad"), "routes[3][1]"},
		{tenants.Errorf(tenants.EConflict, "taken"), "routes[3]"},
	} {
		var got *tenants.Error
		if !errors.As(tenants.AtPath("routes[3]", c.err), &got) || got.Field != c.want || got.Message != c.err.Message {
			t.Errorf("%v: got %v, want field %s", c.err, got, c.want)
		}
	}
	plain := errors.New("x")
	if tenants.AtPath("routes[0]", plain) != plain {
		t.Error("a non-domain error was changed")
	}
}

// TestConfigCheckNames: a name twice is refused at its second place.
func TestConfigCheckNames(t *testing.T) {
	doc := &tenants.ConfigDocument{Version: 1, Tenant: "acme", Plans: []*tenants.ConsumerPlan{{Name: "a"}, {Name: "b"}, {Name: "a"}}}
	var e *tenants.Error
	if err := doc.CheckNames(); !errors.As(err, &e) || e.Field != "plans[2].name" {
		t.Fatalf("got %v", err)
	}
	doc = &tenants.ConfigDocument{Version: 1, Tenant: "acme", Domains: []tenants.ConfigDomain{{Hostname: "A.example.com"}, {Hostname: "a.example.com"}}}
	if err := doc.CheckNames(); !errors.As(err, &e) || e.Field != "domains[1].hostname" {
		t.Fatalf("got %v", err)
	}
}
