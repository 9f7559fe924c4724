package web_test

import (
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants/postgres/pgtest"
	"tollgate/web"
)

// TestEdgeAddressInExamples: the sign-up and routes pages name the edge as configured:
// its domain and port, or the load balancer's address in front of the edges.
func TestEdgeAddressInExamples(t *testing.T) {
	db, _ := pgtest.Open(t)
	owner := (&consoleEnv{t: t, db: db}).signUp("acme", true)
	for _, tc := range []struct {
		cfg          web.Config
		signup, home string
	}{
		{web.Config{EdgeDomain: "edge.test", EdgePort: "8443"}, "http://&lt;slug&gt;.edge.test:8443/", "http://acme.edge.test:8443"},
		{web.Config{EdgeDomain: "edge.test", EdgePort: "8443", EdgePublicURL: "https://api.example.com"}, "https://&lt;slug&gt;.api.example.com/", "https://acme.api.example.com"},
	} {
		cfg := tc.cfg
		cfg.Tenants, cfg.Routes, cfg.Consumers, cfg.People, cfg.Audit = db, db, db, db, db
		app := fiber.New(fiber.Config{Immutable: true})
		web.New(cfg).Mount(app)
		e := &consoleEnv{t: t, app: app, db: db}
		if pg := e.get(person{}, "/console/signup"); !strings.Contains(pg.body, `data-testid="edge-pattern">`+tc.signup+`<`) {
			t.Errorf("sign-up page with %+v does not name %s", tc.cfg, tc.signup)
		}
		if pg := e.get(owner, "/console/t/acme/routes"); !strings.Contains(pg.body, `data-testid="edge-url">`+tc.home+`<`) {
			t.Errorf("routes page with %+v does not name %s:\n%s", tc.cfg, tc.home, pg.body)
		}
	}
}
