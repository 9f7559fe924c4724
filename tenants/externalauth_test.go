package tenants_test

import (
	"errors"
	"slices"
	"testing"

	"tollgate/tenants"
)

func externalRoute(a *tenants.ExternalAuth) *tenants.Route {
	r := validRoute()
	r.Auth = tenants.AuthExternal
	r.ExternalAuth = a
	return r
}

func TestExternalAuthDefaults(t *testing.T) {
	r := externalRoute(&tenants.ExternalAuth{URL: "https://Auth.Example.com/check/"})
	if err := r.Validate(strict); err != nil {
		t.Fatal(err)
	}
	a := r.ExternalAuth
	if a.URL != "https://auth.example.com/check" || a.TimeoutMS != 1000 || *a.CacheTTLS != 60 || *a.DenyCacheTTLS != 10 ||
		!slices.Equal(a.Headers, []string{"Authorization", "X-Api-Key", "Cookie"}) {
		t.Fatalf("defaults: %+v", a)
	}
	zero := 0
	r = externalRoute(&tenants.ExternalAuth{URL: "https://auth.example.com", Headers: []string{"x-session", "authorization"}, CacheTTLS: &zero})
	if err := r.Validate(strict); err != nil {
		t.Fatal(err)
	}
	if *r.ExternalAuth.DenyCacheTTLS != 0 || !slices.Equal(r.ExternalAuth.Headers, []string{"X-Session", "Authorization"}) {
		t.Fatalf("no cache: %+v", r.ExternalAuth)
	}
}

func TestExternalAuthRejects(t *testing.T) {
	n := func(v int) *int { return &v }
	for _, c := range []struct {
		name  string
		auth  string
		a     *tenants.ExternalAuth
		field string
	}{
		{"missing", tenants.AuthExternal, nil, "external_auth"},
		{"without auth external", tenants.AuthKey, &tenants.ExternalAuth{URL: "https://auth.example.com"}, "external_auth"},
		{"plain http", tenants.AuthExternal, &tenants.ExternalAuth{URL: "http://auth.example.com"}, "external_auth.url"},
		{"no url", tenants.AuthExternal, &tenants.ExternalAuth{}, "external_auth.url"},
		{"loopback", tenants.AuthExternal, &tenants.ExternalAuth{URL: "https://127.0.0.1:8443"}, "external_auth.url"},
		{"private", tenants.AuthExternal, &tenants.ExternalAuth{URL: "https://10.1.2.3"}, "external_auth.url"},
		{"query", tenants.AuthExternal, &tenants.ExternalAuth{URL: "https://auth.example.com/?a=1"}, "external_auth.url"},
		{"credentials", tenants.AuthExternal, &tenants.ExternalAuth{URL: "https://u:p@auth.example.com"}, "external_auth.url"},
		{"empty headers", tenants.AuthExternal, &tenants.ExternalAuth{URL: "https://auth.example.com", Headers: []string{}}, "external_auth.headers"},
		{"bad header", tenants.AuthExternal, &tenants.ExternalAuth{URL: "https://auth.example.com", Headers: []string{"X_Token"}}, "external_auth.headers[0]"},
		{"twice", tenants.AuthExternal, &tenants.ExternalAuth{URL: "https://auth.example.com", Headers: []string{"Cookie", "cookie"}}, "external_auth.headers[1]"},
		{"too many", tenants.AuthExternal, &tenants.ExternalAuth{URL: "https://auth.example.com", Headers: make([]string, 17)}, "external_auth.headers"},
		{"timeout", tenants.AuthExternal, &tenants.ExternalAuth{URL: "https://auth.example.com", TimeoutMS: 5001}, "external_auth.timeout_ms"},
		{"negative timeout", tenants.AuthExternal, &tenants.ExternalAuth{URL: "https://auth.example.com", TimeoutMS: -1}, "external_auth.timeout_ms"},
		{"ttl", tenants.AuthExternal, &tenants.ExternalAuth{URL: "https://auth.example.com", CacheTTLS: n(3601)}, "external_auth.cache_ttl_s"},
		{"deny ttl", tenants.AuthExternal, &tenants.ExternalAuth{URL: "https://auth.example.com", CacheTTLS: n(5), DenyCacheTTLS: n(6)}, "external_auth.deny_cache_ttl_s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := externalRoute(c.a)
			r.Auth = c.auth
			err := r.Validate(strict)
			var te *tenants.Error
			if !errors.As(err, &te) || te.Code != tenants.EValidation || te.Field != c.field {
				t.Fatalf("got %v, want validation_failed on %s", err, c.field)
			}
		})
	}
	// The operator's rule re-admits loopback authorizers as it does upstreams.
	if err := externalRoute(&tenants.ExternalAuth{URL: "https://127.0.0.1:8443"}).Validate(devAddressRule); err != nil {
		t.Fatal(err)
	}
}
