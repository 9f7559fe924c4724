package openapiimport_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"tollgate/tenants"
	"tollgate/tenants/openapiimport"
)

var upstream = tenants.Upstream{Targets: []tenants.Target{{URL: "http://127.0.0.1:9000"}}}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func byPath(res *openapiimport.Result) map[string]*tenants.Route {
	m := map[string]*tenants.Route{}
	for _, r := range res.Routes {
		m[r.Path] = r.Route
	}
	return m
}

func TestConvertPetStore(t *testing.T) {
	res, err := openapiimport.Convert(mustRead(t, "petstore.yaml"), openapiimport.Options{Upstream: upstream})
	if err != nil {
		t.Fatal(err)
	}
	if res.API != "pet-store" || res.Base != "/v1" {
		t.Fatalf("api %q base %q", res.API, res.Base)
	}
	got := byPath(res)
	for _, c := range []struct {
		path, name, routePath, methods, auth string
	}{
		{"/pets", "openapi:pet-store:/pets", "=/v1/pets", "GET,POST", tenants.AuthKeyOrJWT},
		{"/pets/{petId}", "openapi:pet-store:/pets/{petId}", "=/v1/pets/{petId}", "GET,DELETE", tenants.AuthKey},
		{"/health", "openapi:pet-store:/health", "=/v1/health", "GET", tenants.AuthNone},
	} {
		r := got[c.path]
		if r == nil {
			t.Errorf("%s: no route; result %+v", c.path, res)
			continue
		}
		if r.Name != c.name || r.Paths[0] != c.routePath || strings.Join(r.Methods, ",") != c.methods || r.Auth != c.auth {
			t.Errorf("%s: got name %q paths %v methods %v auth %q; want %q %q %q %q", c.path, r.Name, r.Paths, r.Methods, r.Auth, c.name, c.routePath, c.methods, c.auth)
		}
		if r.Upstream.Targets[0].URL != upstream.Targets[0].URL || &r.Upstream.Targets[0] == &upstream.Targets[0] {
			t.Errorf("%s: upstream %+v is not a copy of the option's", c.path, r.Upstream)
		}
	}
	if len(res.Routes) != 3 {
		t.Errorf("routes: got %d, want 3", len(res.Routes))
	}
	skipped := map[string]string{}
	for _, s := range res.Skipped {
		skipped[s.Path] = s.Reason
	}
	if !strings.Contains(skipped["/files/{name}.json"], "a parameter is a whole segment") {
		t.Errorf("/files/{name}.json: reason %q", skipped["/files/{name}.json"])
	}
	if !strings.Contains(skipped["/login"], "basic") {
		t.Errorf("/login: reason %q", skipped["/login"])
	}
	notes := ""
	for _, n := range res.Notes {
		notes += n.Path + ": " + n.Message + "\n"
	}
	for _, want := range []string{"/pets/{petId}: TRACE: not a method", "/pets: its operations differ in auth (GET key, POST jwt)"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
}

func TestConvertOptions(t *testing.T) {
	doc := mustRead(t, "petstore.yaml")
	none := ""
	res, err := openapiimport.Convert(doc, openapiimport.Options{Upstream: upstream, Auth: tenants.AuthJWT, Prefix: &none})
	if err != nil {
		t.Fatal(err)
	}
	got := byPath(res)
	if r := got["/pets/{petId}"]; r == nil || r.Paths[0] != "=/pets/{petId}" || r.Auth != tenants.AuthJWT {
		t.Errorf("prefix none, auth jwt: %+v", r)
	}
	// With auth set, what the edge cannot check is no reason to leave a path out.
	if r := got["/login"]; r == nil || r.Auth != tenants.AuthJWT {
		t.Errorf("/login with auth set: %+v", r)
	}
	api := "/api/"
	res, err = openapiimport.Convert(doc, openapiimport.Options{Upstream: upstream, Prefix: &api})
	if err != nil {
		t.Fatal(err)
	}
	if r := byPath(res)["/health"]; r == nil || r.Paths[0] != "=/api/health" {
		t.Errorf("prefix /api/: %+v", r)
	}
}

func TestConvert31(t *testing.T) {
	res, err := openapiimport.Convert(mustRead(t, "openapi31.json"), openapiimport.Options{Upstream: upstream})
	if err != nil {
		t.Fatal(err)
	}
	r := byPath(res)["/users/{id}"]
	if r == nil || r.Name != "openapi:users:/users/{id}" || r.Paths[0] != "=/users/{id}" || r.Auth != tenants.AuthNone {
		t.Fatalf("route %+v", r)
	}
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0].Message, "webhooks") {
		t.Errorf("notes %+v", res.Notes)
	}
}

func TestConvertRefuses(t *testing.T) {
	bad := "a:b"
	for _, c := range []struct {
		name, doc string
		opt       openapiimport.Options
		field     string
		msg       string
	}{
		{"not a document", `{"hello": 1`, openapiimport.Options{}, "openapi", "not an OpenAPI document"},
		{"swagger", `{"swagger":"2.0","info":{"title":"x","version":"1"},"paths":{}}`, openapiimport.Options{}, "openapi", "Swagger 2.0"},
		{"version", `{"openapi":"4.0","info":{"title":"x","version":"1"},"paths":{}}`, openapiimport.Options{}, "openapi.openapi", "OpenAPI 3"},
		{"no version", `{"info":{"title":"x","version":"1"},"paths":{}}`, openapiimport.Options{}, "openapi.openapi", "required"},
		{"invalid", `{"openapi":"3.0.3","info":{"title":"x"},"paths":{"/a":{"get":{"responses":{"200":{"description":"ok"}}}}}}`, openapiimport.Options{}, "openapi.info", "version"},
		{"operation", `{"openapi":"3.0.3","info":{"title":"x","version":"1"},"paths":{"/a/{id}":{"get":{"responses":{"200":{"description":"ok"}}}}}}`, openapiimport.Options{}, "openapi.paths", "missing: [id]"},
		{"component", `{"openapi":"3.0.3","info":{"title":"x","version":"1"},"paths":{"/a":{"get":{"responses":{"200":{"description":"ok"}}}}},"components":{"schemas":{"Pet":{"type":"bogus"}}}}`, openapiimport.Options{}, `openapi.components.schemas["Pet"]`, "bogus"},
		{"parameter", `{"openapi":"3.0.3","info":{"title":"x","version":"1"},"paths":{"/a":{"get":{"parameters":[{"name":"q","in":"nowhere"}],"responses":{"200":{"description":"ok"}}}}}}`, openapiimport.Options{}, `openapi.paths["/a"].get`, "nowhere"},
		{"no paths", `{"openapi":"3.0.3","info":{"title":"x","version":"1"},"paths":{}}`, openapiimport.Options{}, "openapi.paths", "no paths"},
		{"external ref", `{"openapi":"3.0.3","info":{"title":"x","version":"1"},"paths":{"/a":{"$ref":"http://169.254.169.254/x.json#/a"}}}`, openapiimport.Options{}, "openapi", ""},
		{"bad prefix", `{"openapi":"3.0.3","info":{"title":"x","version":"1"},"paths":{"/a":{"get":{"responses":{"200":{"description":"ok"}}}}}}`, openapiimport.Options{Prefix: &bad}, "prefix", "must start with /"},
		{"bad auth", `{}`, openapiimport.Options{Auth: "basic"}, "auth", "must be one of"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := openapiimport.Convert([]byte(c.doc), c.opt)
			var e *tenants.Error
			if !errors.As(err, &e) || e.Code != tenants.EValidation {
				t.Fatalf("got %v, want a validation error", err)
			}
			if e.Field != c.field || !strings.Contains(e.Message, c.msg) {
				t.Errorf("got field %q message %q; want field %q, message with %q", e.Field, e.Message, c.field, c.msg)
			}
		})
	}
}

func TestRouteNames(t *testing.T) {
	long := "/" + strings.Repeat("segment/", 20) + "{id}"
	other := "/" + strings.Repeat("segment/", 20) + "{id}/x"
	doc := `{"openapi":"3.0.3","info":{"title":"  Über API!! v2 ","version":"1"},"paths":{
		"` + long + `":{"get":{"parameters":[{"name":"id","in":"path","required":true,"schema":{"type":"string"}}],"responses":{"200":{"description":"ok"}}}},
		"` + other + `":{"get":{"parameters":[{"name":"id","in":"path","required":true,"schema":{"type":"string"}}],"responses":{"200":{"description":"ok"}}}},
		"/a/{x}.json":{"get":{"parameters":[{"name":"x","in":"path","required":true,"schema":{"type":"string"}}],"responses":{"200":{"description":"ok"}}}},
		"/a/{y}":{"get":{"parameters":[{"name":"y","in":"path","required":true,"schema":{"type":"string"}}],"responses":{"200":{"description":"ok"}}}}}}`
	res, err := openapiimport.Convert([]byte(doc), openapiimport.Options{Upstream: upstream})
	if err != nil {
		t.Fatal(err)
	}
	if res.API != "ber-api-v2" {
		t.Errorf("api %q", res.API)
	}
	names := map[string]bool{}
	for _, r := range res.Routes {
		if err := tenants.ValidateName(r.Route.Name); err != nil {
			t.Errorf("%s: name %q: %v", r.Path, r.Route.Name, err)
		}
		if !openapiimport.Owns(res.API, r.Route.Name) || openapiimport.Owns("ber", r.Route.Name) {
			t.Errorf("%s: Owns is wrong for %q", r.Path, r.Route.Name)
		}
		names[r.Route.Name] = true
	}
	if len(res.Routes) != 3 || len(names) != 3 {
		t.Errorf("routes %d, distinct names %d; want 3 and 3", len(res.Routes), len(names))
	}
	if len(res.Skipped) != 1 || res.Skipped[0].Path != "/a/{x}.json" {
		t.Errorf("skipped %+v", res.Skipped)
	}
	again, _ := openapiimport.Convert([]byte(doc), openapiimport.Options{Upstream: upstream})
	for i := range res.Routes {
		if again.Routes[i].Route.Name != res.Routes[i].Route.Name {
			t.Errorf("names are not stable: %q then %q", res.Routes[i].Route.Name, again.Routes[i].Route.Name)
		}
	}
}

func TestConvertParamNames(t *testing.T) {
	doc := `{"openapi":"3.0.3","info":{"title":"p","version":"1"},"paths":{
		"/pets/{pet-id}":{"get":{"parameters":[{"name":"pet-id","in":"path","required":true,"schema":{"type":"string"}}],"responses":{"200":{"description":"ok"}}}}}}`
	res, err := openapiimport.Convert([]byte(doc), openapiimport.Options{Upstream: upstream})
	if err != nil {
		t.Fatal(err)
	}
	r := byPath(res)["/pets/{pet-id}"]
	if r == nil || r.Paths[0] != "=/pets/{pet_id}" || r.Name != "openapi:p:/pets/{pet-id}" {
		t.Fatalf("route %+v", r)
	}
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0].Message, "{pet-id} is {pet_id}") {
		t.Errorf("notes %+v", res.Notes)
	}
}
