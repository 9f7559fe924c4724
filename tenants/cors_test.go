package tenants_test

import (
	"strings"
	"testing"

	"tollgate/tenants"
)

func TestCORSValidate(t *testing.T) {
	c := &tenants.CORS{AllowOrigins: []string{"HTTPS://App.Example.com:443", "http://localhost:3000"}, AllowMethods: []string{"get"}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.AllowOrigins, " "); got != "https://app.example.com http://localhost:3000" {
		t.Errorf("origins normalized to %q", got)
	}
	if c.AllowMethods[0] != "GET" || c.MaxAgeS != tenants.DefaultCORSMaxAgeS {
		t.Errorf("normalized to %+v", c)
	}
	for _, bad := range []struct {
		c     tenants.CORS
		field string
	}{
		{tenants.CORS{}, "cors.allow_origins"},
		{tenants.CORS{AllowOrigins: []string{"*"}, AllowCredentials: true}, "cors.allow_origins[0]"},
		{tenants.CORS{AllowOrigins: []string{"*", "https://a.example"}}, "cors.allow_origins[0]"},
		{tenants.CORS{AllowOrigins: []string{"https://a.example/path"}}, "cors.allow_origins[0]"},
		{tenants.CORS{AllowOrigins: []string{"ftp://a.example"}}, "cors.allow_origins[0]"},
		{tenants.CORS{AllowOrigins: []string{"a.example"}}, "cors.allow_origins[0]"},
		{tenants.CORS{AllowOrigins: []string{"https://user@a.example"}}, "cors.allow_origins[0]"},
		{tenants.CORS{AllowOrigins: []string{"*"}, AllowMethods: []string{"TRACE"}}, "cors.allow_methods[0]"},
		{tenants.CORS{AllowOrigins: []string{"*"}, AllowHeaders: []string{"bad header"}}, "cors.allow_headers[0]"},
		{tenants.CORS{AllowOrigins: []string{"*"}, ExposeHeaders: []string{""}}, "cors.expose_headers[0]"},
		{tenants.CORS{AllowOrigins: []string{"*"}, MaxAgeS: 86401}, "cors.max_age_s"},
	} {
		err := bad.c.Validate()
		if err == nil || !strings.Contains(err.Error(), bad.field) {
			t.Errorf("%+v: %v, want an error naming %s", bad.c, err, bad.field)
		}
	}
}
