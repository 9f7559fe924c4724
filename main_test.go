package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHelp runs the built binary as a person would first run it: help exits 0, lists
// the commands and the variables they read, and needs no environment (a Stripe
// command's help does not ask for the Stripe key); a command line that names nothing
// exits 2 with the reason and the usage, on stderr.
func TestHelp(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "tollgate")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var env []string // TOLLGATE_* variables of the next run
	run := func(args ...string) (code int, stdout, stderr string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		// No TOLLGATE_* variable but env's: help must not need one, and a usage error
		// must be found before any is read.
		cmd.Env = env
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "TOLLGATE_") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			code = exit.ExitCode()
		case err != nil:
			t.Fatalf("tollgate %s: %v", strings.Join(args, " "), err)
		}
		return code, o.String(), e.String()
	}

	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"dev", "api", "edge", "billing", "migrate", "config", "completion", "TOLLGATE_", "docs/configuration.md"}},
		{[]string{"help", "billing"}, []string{"reconcile", "export", "enable", "push", "subscribe", "TOLLGATE_DATABASE_URL"}},
		{[]string{"billing", "--help"}, []string{"reconcile", "export", "enable", "push", "subscribe", "TOLLGATE_DATABASE_URL"}},
		{[]string{"billing", "push", "--help"}, []string{"tollgate billing push", "TOLLGATE_STRIPE_KEY"}},
		{[]string{"billing", "reconcile", "--help"}, []string{"--period", "--json", "--settle", "TOLLGATE_NATS_URL"}},
		{[]string{"api", "--help"}, []string{"--resync", "TOLLGATE_ADMIN_TOKEN"}},
		{[]string{"edge", "--help"}, []string{"TOLLGATE_EDGE_ADDR"}},
		{[]string{"dev", "--help"}, []string{"TOLLGATE_DATABASE_URL"}},
		{[]string{"config", "apply", "--help"}, []string{"-f, --file", "--dry-run", "--prune", "--force", "--api", "--token", "TOLLGATE_TOKEN"}},
		{[]string{"completion", "bash"}, []string{"tollgate"}},
	} {
		code, stdout, stderr := run(tc.args...)
		if code != 0 {
			t.Errorf("tollgate %s: exit %d, want 0\n%s%s", strings.Join(tc.args, " "), code, stdout, stderr)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(stdout, w) {
				t.Errorf("tollgate %s does not mention %q:\n%s", strings.Join(tc.args, " "), w, stdout)
			}
		}
	}

	for _, tc := range []struct {
		args   []string
		reason string
	}{
		{nil, "tollgate: missing command"},
		{[]string{"nosuch"}, `tollgate: unknown command "nosuch"`},
		{[]string{"--nosuch"}, "tollgate: unknown flag: --nosuch"},
		{[]string{"billing", "nosuch"}, `tollgate billing: unknown command "nosuch"`},
		{[]string{"billing", "reconcile"}, `tollgate billing reconcile: required flag(s) "period" not set`},
		{[]string{"api", "--nosuch"}, "tollgate api: unknown flag: --nosuch"},
		{[]string{"config"}, "tollgate config: missing command"},
		{[]string{"config", "export"}, `tollgate config export: required flag(s) "tenant" not set`},
	} {
		code, stdout, stderr := run(tc.args...)
		name := strings.Join(tc.args, " ")
		if code != 2 {
			t.Errorf("tollgate %s: exit %d, want 2\n%s%s", name, code, stdout, stderr)
			continue
		}
		first, rest, _ := strings.Cut(stderr, "\n")
		if !strings.HasPrefix(first, tc.reason) {
			t.Errorf("tollgate %s: first line %q, want %q", name, first, tc.reason)
		}
		if !strings.Contains(rest, "Usage:") {
			t.Errorf("tollgate %s: no usage after the reason:\n%s", name, stderr)
		}
		if stdout != "" {
			t.Errorf("tollgate %s wrote to stdout: %s", name, stdout)
		}
	}

	// A failure of the command's work, here a bad setting, is exit 1 and one line named
	// after the command, as it always was.
	env = []string{"TOLLGATE_NATS_REPLICAS=9"}
	code, _, stderr := run("billing", "push")
	if want := "tollgate billing: TOLLGATE_NATS_REPLICAS"; code != 1 || !strings.HasPrefix(stderr, want) || strings.Contains(stderr, "Usage:") {
		t.Errorf("tollgate billing push with a bad setting: exit %d, want 1 and %q alone:\n%s", code, want, stderr)
	}
}
