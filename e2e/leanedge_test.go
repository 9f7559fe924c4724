package e2e

import (
	"strings"
	"testing"
)

// tollgate-edge, the binary the deploy files run for the edge, is `tollgate edge`: it
// follows the same bucket and serves the same routes, refuses a bad setting at start
// with the variable named, and drains and exits 0 on SIGTERM.
func TestLeanEdgeBinary(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	s.leanEdge = true
	edgeProc, edge := s.startEdge()
	up := echoUpstream(t, "lean-upstream")

	api.createTenant("acme")
	api.createRoute("acme", routeSpec("hello", "/hello", up.URL, "key", "methods", []string{"GET"}))
	consumer := api.createConsumer("acme", "mobile-app")
	_, key := api.createKey("acme", consumer)
	eventually(t, applyDeadline, "the route and key work at tollgate-edge",
		served(edge, "acme", "/hello", "lean-upstream", "X-API-Key", key))
	if r := edge.get(t, "acme", "/hello"); r.Status != 401 {
		t.Errorf("GET /hello without a key: %d, want 401", r.Status)
	}

	bad := startArgv(t, "tollgate-edge (bad setting)", []string{edgeBin}, s.env("TOLLGATE_EDGE_RAW_IO=sometimes"))
	bad.waitExit(t, readyTimeout)
	if code, out := bad.exitCode(), bad.output.String(); code != 1 || !strings.HasPrefix(out, "tollgate-edge: TOLLGATE_EDGE_RAW_IO:") {
		t.Errorf("tollgate-edge with TOLLGATE_EDGE_RAW_IO=sometimes: exit %d, output %q; want 1 and the variable named", code, out)
	}

	edgeProc.stopClean(t, stopTimeout)
}
