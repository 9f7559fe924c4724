package api_test

import (
	"strings"
	"testing"

	"tollgate/api"
)

func TestAuth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tenant("alpha")
	e.tenant("beta")
	ta, tb := e.token("alpha"), e.token("beta")
	// Objects of beta, to probe by id with alpha's token.
	rB := e.route("beta", "r", "/r")
	cB := e.consumer("beta", "c")
	pB := e.plan("beta", "p")
	kB := e.do("POST", "/v1/tenants/beta/consumers/"+cB+"/keys", adminToken, nil).want(201).str("id")
	tokB := e.do("GET", "/v1/tenants/beta/tokens", adminToken, nil).want(200).items()[0].(map[string]any)["id"].(string)
	// And one of alpha's own, for object ids of B under A's slug.
	cA := e.consumer("alpha", "c")

	t.Run("credentials", func(t *testing.T) {
		cases := []struct {
			name, header string
			status       int
			code         string
		}{
			{"missing", "", 401, "unauthenticated"},
			{"not bearer", "Basic " + adminToken, 401, "unauthenticated"},
			{"bearer without token", "Bearer ", 401, "unauthenticated"},
			{"unknown token", "Bearer nope", 401, "invalid_credential"},
			{"unknown tenant token", "Bearer tgt_0123456789abcdefghijklmnopqrstuv", 401, "invalid_credential"},
			{"admin token prefix", "Bearer " + adminToken[:10], 401, "invalid_credential"},
			{"admin token extended", "Bearer " + adminToken + "x", 401, "invalid_credential"},
			{"huge token", "Bearer tgt_" + strings.Repeat("a", 1000), 401, "invalid_credential"},
			{"admin", "Bearer " + adminToken, 200, ""},
			{"admin, lower-case scheme", "bearer " + adminToken, 200, ""},
			{"tenant token", "Bearer " + ta, 200, ""},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				r := e.do("GET", "/v1/tenants/alpha", "", nil, "Authorization", c.header)
				if c.code == "" {
					r.want(c.status)
					return
				}
				r.wantErr(c.status, c.code, "")
				if r.header.Get("WWW-Authenticate") == "" {
					t.Errorf("401 without WWW-Authenticate")
				}
			})
		}
	})

	t.Run("admin only", func(t *testing.T) {
		e.do("POST", "/v1/tenants", ta, `{"slug":"gamma"}`).wantErr(403, "forbidden", "")
		e.do("GET", "/v1/tenants", ta, nil).wantErr(403, "forbidden", "")
		e.do("DELETE", "/v1/tenants/alpha", ta, nil).wantErr(403, "forbidden", "")
		// Unauthenticated is 401 before anything else.
		e.do("POST", "/v1/tenants", "", `{"slug":"gamma"}`).wantErr(401, "unauthenticated", "")
		// A tenant may rename itself but not change its plan.
		e.do("PATCH", "/v1/tenants/alpha", ta, `{"name":"Alpha!"}`, "If-Match", "*").want(200)
		e.do("PATCH", "/v1/tenants/alpha", ta, `{"plan":"enterprise"}`, "If-Match", "*").wantErr(403, "forbidden", "plan")
		// Sending the current plan is no change, so it is allowed.
		e.do("PATCH", "/v1/tenants/alpha", ta, `{"plan":"pro"}`, "If-Match", "*").want(200)
		if n := e.count("/v1/tenants"); n != 2 {
			t.Fatalf("%d tenants, want 2", n)
		}
		e.do("GET", "/v1/tenants/alpha", ta, nil).want(200)
	})

	t.Run("own tenant", func(t *testing.T) {
		e.do("POST", "/v1/tenants/alpha/routes", ta, routeBody("mine", "/mine")).want(201)
		e.do("GET", "/v1/tenants/alpha/routes", ta, nil).want(200)
		e.do("POST", "/v1/tenants/alpha/consumers/"+cA+"/keys", ta, nil).want(201)
		e.do("POST", "/v1/tenants/alpha/plans", ta, `{"name":"mine"}`).want(201)
	})

	t.Run("other tenant is invisible", func(t *testing.T) {
		// Every tenant-scoped endpoint, with beta's slug and alpha's token: 404, the same
		// answer as for a tenant that does not exist.
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/v1/tenants/beta", ""},
			{"PATCH", "/v1/tenants/beta", `{"name":"pwned","version":1}`},
			{"DELETE", "/v1/tenants/beta", ""},
			{"GET", "/v1/tenants/beta/routes", ""},
			{"POST", "/v1/tenants/beta/routes", `{"name":"x","paths":["/x"],"upstream":{"targets":[{"url":"http://127.0.0.1:9"}]}}`},
			{"GET", "/v1/tenants/beta/routes/" + rB, ""},
			{"PUT", "/v1/tenants/beta/routes/" + rB, `{"name":"x","paths":["/x"],"upstream":{"targets":[{"url":"http://127.0.0.1:9"}]},"version":1}`},
			{"DELETE", "/v1/tenants/beta/routes/" + rB, ""},
			{"GET", "/v1/tenants/beta/consumers", ""},
			{"POST", "/v1/tenants/beta/consumers", `{"name":"x"}`},
			{"GET", "/v1/tenants/beta/consumers/" + cB, ""},
			{"PUT", "/v1/tenants/beta/consumers/" + cB, `{"name":"x","version":1}`},
			{"DELETE", "/v1/tenants/beta/consumers/" + cB, ""},
			{"POST", "/v1/tenants/beta/consumers/" + cB + "/keys", ""},
			{"GET", "/v1/tenants/beta/consumers/" + cB + "/keys", ""},
			{"DELETE", "/v1/tenants/beta/consumers/" + cB + "/keys/" + kB, ""},
			{"GET", "/v1/tenants/beta/plans", ""},
			{"POST", "/v1/tenants/beta/plans", `{"name":"x"}`},
			{"GET", "/v1/tenants/beta/plans/" + pB, ""},
			{"PUT", "/v1/tenants/beta/plans/" + pB, `{"name":"x","version":1}`},
			{"DELETE", "/v1/tenants/beta/plans/" + pB, ""},
			{"GET", "/v1/tenants/beta/tokens", ""},
			{"POST", "/v1/tenants/beta/tokens", `{"name":"x"}`},
			{"DELETE", "/v1/tenants/beta/tokens/" + tokB, ""},
		} {
			var body any
			if c.body != "" {
				body = c.body
			}
			foreign := e.do(c.method, c.path, ta, body).wantErr(404, "not_found", "")
			missing := e.do(c.method, strings.Replace(c.path, "/beta", "/nosuch", 1), ta, body).wantErr(404, "not_found", "")
			if foreign.message() != strings.Replace(missing.message(), "nosuch", "beta", 1) {
				t.Errorf("%s %s: a foreign tenant answers %q, a missing one %q", c.method, c.path, foreign.message(), missing.message())
			}
		}
		// Beta's objects by id under alpha's own slug: not found either.
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/v1/tenants/alpha/routes/" + rB, ""},
			{"PUT", "/v1/tenants/alpha/routes/" + rB, `{"name":"x","paths":["/x"],"upstream":{"targets":[{"url":"http://127.0.0.1:9"}]},"version":1}`},
			{"DELETE", "/v1/tenants/alpha/routes/" + rB, ""},
			{"GET", "/v1/tenants/alpha/consumers/" + cB, ""},
			{"PUT", "/v1/tenants/alpha/consumers/" + cB, `{"name":"x","version":1}`},
			{"DELETE", "/v1/tenants/alpha/consumers/" + cB, ""},
			{"POST", "/v1/tenants/alpha/consumers/" + cB + "/keys", ""},
			{"GET", "/v1/tenants/alpha/consumers/" + cB + "/keys", ""},
			{"DELETE", "/v1/tenants/alpha/consumers/" + cB + "/keys/" + kB, ""},
			{"DELETE", "/v1/tenants/alpha/consumers/" + cA + "/keys/" + kB, ""},
			{"GET", "/v1/tenants/alpha/plans/" + pB, ""},
			{"PUT", "/v1/tenants/alpha/plans/" + pB, `{"name":"x","version":1}`},
			{"DELETE", "/v1/tenants/alpha/plans/" + pB, ""},
			{"DELETE", "/v1/tenants/alpha/tokens/" + tokB, ""},
		} {
			var body any
			if c.body != "" {
				body = c.body
			}
			e.do(c.method, c.path, ta, body).wantErr(404, "not_found", "")
			// Even the admin token finds nothing: the id is beta's, the slug alpha's.
			e.do(c.method, c.path, adminToken, body).wantErr(404, "not_found", "")
		}
		// Beta is untouched and its token still works.
		e.do("GET", "/v1/tenants/beta/routes/"+rB, tb, nil).want(200)
		e.do("GET", "/v1/tenants/beta/consumers/"+cB, tb, nil).want(200)
		e.do("GET", "/v1/tenants/beta/plans/"+pB, tb, nil).want(200)
		if n := len(e.do("GET", "/v1/tenants/beta/consumers/"+cB+"/keys", tb, nil).want(200).items()); n != 1 {
			t.Fatalf("beta has %d keys, want 1", n)
		}
		if n := len(e.do("GET", "/v1/tenants/beta/tokens", tb, nil).want(200).items()); n != 1 {
			t.Fatalf("beta has %d tokens, want 1", n)
		}
		if g := e.do("GET", "/v1/tenants/beta", tb, nil).want(200); g.str("name") != "Tenant beta" {
			t.Fatalf("beta changed: %s", g.body)
		}
	})
}

func TestNoAdminToken(t *testing.T) {
	t.Parallel()
	// With the admin token unset, no bearer value (not even an empty one) is the admin.
	e := newEnv(t, func(c *api.Config) { c.AdminToken = "" })
	e.do("GET", "/v1/tenants", "", nil, "Authorization", "Bearer ").wantErr(401, "unauthenticated", "")
	e.do("GET", "/v1/tenants", "x", nil).wantErr(401, "invalid_credential", "")
	e.do("GET", "/v1/tenants", adminToken, nil).wantErr(401, "invalid_credential", "")
}
