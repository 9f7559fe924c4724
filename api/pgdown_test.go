package api_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"tollgate/api"
	"tollgate/tenants/postgres"
	"tollgate/tenants/postgres/pgtest"
)

// dbBound is the request bound of these tests; dbSlack is what a busy machine may add to
// it before an answer counts as hanging.
const (
	dbBound = time.Second
	dbSlack = 15 * time.Second
)

// newProxiedEnv is newEnv with the server's store behind a proxy the test can cut and
// freeze, wired as the binary wires it (the request bound, the driver's classification).
// e.db stays a direct store, for fixtures made while the proxy is down.
func newProxiedEnv(t *testing.T) (*env, *pgtest.Proxy) {
	t.Helper()
	direct, url := pgtest.Open(t, postgres.WithUpstreamAddressRule(policy))
	p, purl := pgtest.NewProxy(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := postgres.Open(ctx, purl, postgres.WithUpstreamAddressRule(policy), postgres.WithTimeout(dbBound))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	logs := &syncBuffer{}
	srv := api.New(api.Config{
		Tenants: db, Routes: db, Consumers: db, Plans: db, Tokens: db,
		JWTIssuers: db, AccessRules: db, People: db, Audit: db,
		Domains: db, EdgeDomain: "edge.test",
		AdminToken:     adminToken,
		Upstreams:      policy,
		Logger:         slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Ready:          db.Ping,
		RequestTimeout: dbBound,
		Unavailable:    postgres.Unavailable,
	})
	e := &env{t: t, srv: srv, db: direct, log: logs}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	r := e.do("GET", "/v1/openapi.json", "", nil).want(200)
	if err := json.Unmarshal(r.body, &e.doc); err != nil {
		t.Fatal(err)
	}
	return e, p
}

// wantNotReady sends a request and checks it is answered 503 not_ready with Retry-After,
// and soon: the database comes back only after it was answered.
func (e *env) wantNotReady(method, path, token string, body any) {
	e.t.Helper()
	start := time.Now()
	r := e.do(method, path, token, body).wantErr(503, "not_ready", "")
	if took := time.Since(start); took > dbBound+dbSlack {
		e.t.Fatalf("%s %s: answered after %v, far past the bound %v", method, path, took, dbBound)
	}
	if r.header.Get("Retry-After") == "" {
		e.t.Fatalf("%s %s: 503 without Retry-After", method, path)
	}
}

func TestDatabaseDown(t *testing.T) {
	t.Parallel()
	for _, fault := range []string{"stopped", "frozen"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			e, p := newProxiedEnv(t)
			e.tenant("acme")
			tok := e.token("acme")
			if fault == "stopped" {
				p.Cut()
			} else {
				p.Freeze()
			}
			e.wantNotReady("GET", "/v1/tenants/acme", adminToken, nil)
			e.wantNotReady("GET", "/v1/tenants/acme/routes", tok, nil) // the token's lookup fails: not 401
			e.wantNotReady("POST", "/v1/tenants", adminToken, map[string]any{"slug": "beta", "name": "Beta"})
			e.wantNotReady("POST", "/v1/tenants/acme/routes", adminToken, routeBody("r", "/r"))
			e.wantNotReady("GET", "/readyz", "", nil)
			e.do("GET", "/healthz", "", nil).want(200)
			if !strings.Contains(e.log.String(), "the store did not answer") {
				t.Fatalf("503s not logged with their cause")
			}
			if strings.Contains(e.log.String(), "internal error") {
				t.Fatalf("an unreachable database was logged as an internal error")
			}

			p.Restore()
			deadline := time.Now().Add(30 * time.Second)
			for e.do("GET", "/readyz", "", nil).status != 200 {
				if time.Now().After(deadline) {
					t.Fatal("still not ready 30s after the database came back")
				}
				time.Sleep(50 * time.Millisecond)
			}
			e.do("GET", "/v1/tenants/acme/routes", tok, nil).want(200)
			e.do("POST", "/v1/tenants", adminToken, map[string]any{"slug": "beta", "name": "Beta"}).want(201)
			// A write answered 503 before it reached the database did not happen.
			if n := e.count("/v1/tenants/acme/routes"); n != 0 {
				t.Fatalf("%d routes after a create answered 503 while the database was %s", n, fault)
			}
		})
	}
}
