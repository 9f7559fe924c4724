package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigAsCode: `tollgate config export` and `apply` against a running api, as a CI
// job runs them. An export applies back to no change and exports the same bytes; a dry
// run changes nothing; an applied route is served at the edge; applying it twice says
// "no changes"; an edit of a stale export is refused, and forced with --prune it deletes
// what the document dropped.
func TestConfigAsCode(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	_, edge := s.startEdge()
	up := echoUpstream(t, "cac-upstream")
	dir := t.TempDir()

	api.createTenant("acme")
	api.createRoute("acme", routeSpec("hello", "/hello", up.URL, "none"))
	api.must(201, "POST", "/v1/tenants/acme/plans", map[string]any{"name": "gold", "rate_limit": map[string]any{"rps": 100}})
	eventually(t, applyDeadline, "the route made through the API is served", served(edge, "acme", "/hello", "cac-upstream"))

	// The CLI finds the API and its token in the environment.
	cli := func(wantExit int, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"config"}, args...)...)
		cmd.Env = append(os.Environ(), "TOLLGATE_API_URL="+api.base, "TOLLGATE_TOKEN="+s.token, "TOLLGATE_ADMIN_TOKEN=")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("tollgate config %s: %v", strings.Join(args, " "), err)
		}
		if code != wantExit {
			t.Fatalf("tollgate config %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, wantExit, stdout.String(), stderr.String())
		}
		return stdout.String() + stderr.String()
	}
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	exported := cli(0, "export", "--tenant", "acme")
	if !strings.Contains(exported, "tenant: acme\n") || !strings.Contains(exported, "name: hello\n") {
		t.Fatalf("export:\n%s", exported)
	}
	first := write("acme.yaml", exported)
	if out := cli(0, "apply", "-f", first); !strings.Contains(out, "acme: no changes") {
		t.Fatalf("applying the export: %s", out)
	}
	if again := cli(0, "export", "--tenant", "acme"); again != exported {
		t.Fatalf("export → apply → export differs:\n%s\n%s", exported, again)
	}

	// An edit in JSON: a new route.
	var doc map[string]any
	if err := json.Unmarshal([]byte(cli(0, "export", "--tenant", "acme", "-o", "json")), &doc); err != nil {
		t.Fatal(err)
	}
	doc["routes"] = append(doc["routes"].([]any), routeSpec("added", "/added", up.URL, "none"))
	b, _ := json.Marshal(doc)
	edited := write("acme-edited.json", string(b))

	if out := cli(0, "apply", "-f", edited, "--dry-run"); !strings.Contains(out, "+ route added") || !strings.Contains(out, "dry run") {
		t.Fatalf("dry run: %s", out)
	}
	if r := api.call("GET", "/v1/tenants/acme/routes", nil); strings.Contains(string(r.Raw), `"added"`) {
		t.Fatalf("the dry run created the route: %s", r.Raw)
	}
	if out := cli(0, "apply", "-f", edited); !strings.Contains(out, "+ route added") || !strings.Contains(out, "1 created") {
		t.Fatalf("apply: %s", out)
	}
	eventually(t, applyDeadline, "the applied route is served", served(edge, "acme", "/added", "cac-upstream"))
	if out := cli(0, "apply", "-f", edited); !strings.Contains(out, "acme: no changes") {
		t.Fatalf("second apply: %s", out)
	}

	// The first export is stale now: an edit of it is refused, and nothing changes.
	stale := write("stale.yaml", strings.Replace(exported, "timeout_ms: 30000", "timeout_ms: 5000", 1))
	if out := cli(1, "apply", "-f", stale); !strings.Contains(out, "version_conflict") {
		t.Fatalf("stale apply: %s", out)
	}
	out := cli(0, "apply", "-f", stale, "--force", "--prune")
	if !strings.Contains(out, "~ route hello") || !strings.Contains(out, "- route added") {
		t.Fatalf("forced apply with prune: %s", out)
	}
	eventually(t, applyDeadline, "the pruned route is gone from the edge", answers(edge, "acme", "/added", 404, "route_not_found"))
	if err := served(edge, "acme", "/hello", "cac-upstream")(); err != nil {
		t.Fatal(err)
	}

	// Errors name the document path and exit 1.
	bad := write("bad.yaml", strings.Replace(exported, "- /hello\n", "- hello\n", 1))
	if out := cli(1, "apply", "-f", bad, "--force"); !strings.Contains(out, "validation_failed: routes[0].paths[0]") {
		t.Fatalf("bad document: %s", out)
	}
}
