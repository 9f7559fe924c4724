package config_test

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestInfraImportsNoProduct: infrastructure is what the domain, the edge, the api and
// billing stand on, so its arrows point one way. A package of infra/... importing tenants
// (or billing, the edge, the api, the console) would make the domain's every change a
// rebuild of the infrastructure under it, and let the edge-only binary drag the domain's
// stores back in through its config. Test helpers (infra/test*) start real servers for
// other packages' tests and may use the domain's types to do it.
func TestInfraImportsNoProduct(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "tollgate/infra/...").Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("go list: %v\n%s", err, exit.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 5 {
		t.Fatalf("go list lists %d infra packages: %q", len(lines), out)
	}
	for _, line := range lines {
		f := strings.Fields(line)
		pkg, imports := f[0], f[1:]
		if strings.HasPrefix(pkg, "tollgate/infra/test") {
			continue
		}
		for _, imp := range imports {
			if strings.HasPrefix(imp, "tollgate/") && !strings.HasPrefix(imp, "tollgate/infra/") {
				t.Errorf("%s imports %s: infrastructure must not depend on the product", pkg, imp)
			}
		}
	}
}
