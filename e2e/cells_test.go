package e2e

import (
	"strings"
	"testing"

	"tollgate/infra/testenv"
)

// TestCells: with two cells on one NATS, each edge pool serves only its cell's tenants;
// the operator moves a tenant, and the other pool's edges serve it while the first's let
// it go. Moving is the admin token's alone, and audited.
func TestCells(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	// Cell c has a NATS of its own: its bucket is there, and its edge connects only there.
	natsC := testenv.NATS(t)
	cells := "TOLLGATE_CELLS=default;b;c=" + natsC.ClientURL()
	_, api := s.startAPI(cells)
	_, edgeA := s.startEdge(cells, "TOLLGATE_EDGE_ID=edge-a")
	sb := *s // each cell's edge pool listens on addresses of its own
	sb.edgeAddr, sb.edgeAdm = freeAddr(t), freeAddr(t)
	_, edgeB := sb.startEdge(cells, "TOLLGATE_EDGE_CELL=b", "TOLLGATE_EDGE_ID=edge-b")
	sc := *s
	sc.edgeAddr, sc.edgeAdm = freeAddr(t), freeAddr(t)
	_, edgeC := sc.startEdge(cells, "TOLLGATE_EDGE_CELL=c", "TOLLGATE_EDGE_ID=edge-c")
	up := echoUpstream(t, "cells-upstream")

	// Placement: the cell with the fewest tenants.
	for _, want := range []string{"default", "b", "c"} {
		created := api.must(201, "POST", "/v1/tenants", map[string]any{"slug": "placed-" + want, "plan": "unlimited"})
		if created["cell"] != want {
			t.Fatalf("placed-%s went to cell %v", want, created["cell"])
		}
	}
	api.createRoute("placed-c", routeSpec("hello", "/hello", up.URL, "none"))
	eventually(t, applyDeadline, "cell c's edge, on its own NATS, serves its tenant", served(edgeC, "placed-c", "/hello", "cells-upstream"))
	if err := answers(edgeA, "placed-c", "/hello", 404, "tenant_not_found")(); err != nil {
		t.Fatalf("the default cell's edge: %v", err)
	}

	created := api.must(201, "POST", "/v1/tenants", map[string]any{"slug": "acme", "plan": "unlimited", "cell": "default"})
	if created["cell"] != "default" {
		t.Fatalf("created in cell %v", created["cell"])
	}
	api.createRoute("acme", routeSpec("hello", "/hello", up.URL, "none"))
	eventually(t, applyDeadline, "the default cell's edge serves acme", served(edgeA, "acme", "/hello", "cells-upstream"))
	if err := answers(edgeB, "acme", "/hello", 404, "tenant_not_found")(); err != nil {
		t.Fatalf("cell b's edge: %v", err)
	}

	// Only the admin token moves a tenant.
	tok := api.must(201, "POST", "/v1/tenants/acme/tokens", map[string]any{"name": "ci", "role": "admin"})
	if r := api.call("PUT", "/v1/tenants/acme/cell", map[string]any{"cell": "b"}, "Authorization", "Bearer "+str(t, tok, "token")); r.Status != 403 {
		t.Fatalf("a tenant token's move: %s", r)
	}
	if r := api.call("PUT", "/v1/tenants/acme/cell", map[string]any{"cell": "nowhere"}); r.Status != 400 || !strings.Contains(string(r.Raw), "validation_failed") {
		t.Fatalf("a move to an undeclared cell: %s", r)
	}
	moved := api.must(200, "PUT", "/v1/tenants/acme/cell", map[string]any{"cell": "b"})
	if moved["cell"] != "b" {
		t.Fatalf("moved to %v", moved["cell"])
	}
	eventually(t, applyDeadline, "cell b's edge serves the moved tenant", served(edgeB, "acme", "/hello", "cells-upstream"))
	eventually(t, applyDeadline, "the default cell's edge lets it go", answers(edgeA, "acme", "/hello", 404, "tenant_not_found"))
	// Later changes follow it.
	api.createRoute("acme", routeSpec("later", "/later", up.URL, "none"))
	eventually(t, applyDeadline, "a route made after the move", served(edgeB, "acme", "/later", "cells-upstream"))

	audit := api.call("GET", "/v1/tenants/acme/audit", nil)
	if audit.Status != 200 || !strings.Contains(string(audit.Raw), `"cells.update"`) {
		t.Fatalf("audit: %s", audit)
	}
	list := api.call("GET", "/v1/cells", nil)
	if list.Status != 200 || !strings.Contains(string(list.Raw), `{"name":"default","tenants":1}`) || !strings.Contains(string(list.Raw), `{"name":"b","tenants":2}`) {
		t.Fatalf("cells: %s", list)
	}
}
