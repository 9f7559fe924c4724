package main

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// deps lists every package the binary links.
func deps(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("go list -deps: %v\n%s", err, exit.Stderr)
		}
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "tollgate/edge/edgecmd") {
		t.Fatalf("go list -deps lists %d packages, tollgate/edgecmd not among them", len(deps))
	}
	return deps
}

// TestLinksOnlyTheEdge: the binary's point is what it leaves out. An import that pulls
// in the api, the console, Postgres, billing, the embedded NATS server or Stripe would
// bring their code (and its RSS) back into every edge, and with it what a compromised
// edge could use.
func TestLinksOnlyTheEdge(t *testing.T) {
	deps := deps(t)
	for _, p := range []string{
		"tollgate/tenants/postgres",
		"github.com/jackc/pgx/v5",
		"github.com/nats-io/nats-server/v2/server",
		"github.com/stripe/stripe-go/v76",
	} {
		if slices.Contains(deps, p) {
			t.Errorf("tollgate-edge links %s", p)
		}
	}
}

// TestLinksNoBilling: no package of billing, the api or the console, not even their
// domain types. What the meter shares with billing (the batch format, the billable rule,
// the publisher) is infra/usage; a new import of tollgate/billing from the edge's side
// would make every billing change an edge release.
func TestLinksNoBilling(t *testing.T) {
	for _, p := range deps(t) {
		for _, root := range []string{"tollgate/billing", "tollgate/api", "tollgate/web"} {
			if p == root || strings.HasPrefix(p, root+"/") {
				t.Errorf("tollgate-edge links %s", p)
			}
		}
	}
}
