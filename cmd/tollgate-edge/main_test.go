package main

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestLinksOnlyTheEdge: the binary's point is what it leaves out. An import that pulls
// in the api, the console, Postgres, billing, the embedded NATS server or Stripe would
// bring their code (and its RSS) back into every edge, and with it what a compromised
// edge could use.
func TestLinksOnlyTheEdge(t *testing.T) {
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
	for _, p := range []string{
		"tollgate/api",
		"tollgate/web",
		"tollgate/web/portal",
		"tollgate/tenants/postgres",
		"tollgate/billing/postgres",
		"tollgate/billing/stripe",
		"tollgate/billing/cli",
		"github.com/jackc/pgx/v5",
		"github.com/nats-io/nats-server/v2/server",
		"github.com/stripe/stripe-go/v76",
	} {
		if slices.Contains(deps, p) {
			t.Errorf("tollgate-edge links %s", p)
		}
	}
}
