package openapiimport_test

import (
	"os"
	"path/filepath"
	"testing"

	"tollgate/tenants"
	"tollgate/tenants/openapiimport"
)

// FuzzConvert: any bytes give routes or a validation error, never a panic, and every
// route is one the import may own: named under its API, one exact path, known methods.
func FuzzConvert(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.*")
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"openapi":"3.0.0","info":{"title":"t","version":"1"},"paths":{"/{a}/{b}":{"get":{"security":[{"k":[]},{}],"parameters":[{"name":"a","in":"path","required":true,"schema":{"type":"string"}},{"name":"b","in":"path","required":true,"schema":{"type":"string"}}],"responses":{"200":{"description":"ok"}}}}},"components":{"securitySchemes":{"k":{"type":"apiKey","in":"query","name":"k"}}}}`))
	f.Add([]byte("openapi: 3.1.0\ninfo: {title: y, version: '1'}\npaths:\n  /x:\n    query: {responses: {'200': {description: ok}}}\n"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		res, err := openapiimport.Convert(doc, openapiimport.Options{Upstream: upstream})
		if err != nil {
			if _, ok := err.(*tenants.Error); !ok {
				t.Fatalf("error %T %v is not a *tenants.Error", err, err)
			}
			return
		}
		for _, r := range res.Routes {
			if !openapiimport.Owns(res.API, r.Route.Name) {
				t.Errorf("%s: name %q is not the import's", r.Path, r.Route.Name)
			}
			if err := tenants.ValidateName(r.Route.Name); err != nil {
				t.Errorf("%s: name %q: %v", r.Path, r.Route.Name, err)
			}
			if len(r.Route.Paths) != 1 || r.Route.Paths[0][0] != '=' || len(r.Route.Methods) == 0 {
				t.Errorf("%s: route %+v", r.Path, r.Route)
			}
		}
	})
}
