// Package functiontest builds the test guests of package function from their sources
// (edge/function/testdata/guests) and gives tests an HTTP to run them against, so the
// host's tests, the edge's and the end-to-end tests run the same guests. Nothing prebuilt
// is committed: Go guests are built with GOOS=wasip1 and //go:wasmexport, WAT guests with
// Debian's wabt (wat2wasm), installed with apt-get when missing (as root or when CI=true).
package functiontest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"tollgate/infra/aptget"
)

// Go guests (directories) and WAT guests (files) under testdata/guests.
const (
	Noop    = "noop"    // every callback continues
	Headers = "headers" // adds x-function: request upstream and x-function: response downstream
	Deny    = "deny"    // a request with X-Deny gets 403 "denied by function: …" and x-denied-by
	Config  = "config"  // echoes its plugin configuration in x-config; refuses the configuration "refuse"
	HMAC    = "hmac"    // seed 000's signature auth; config "keyid=secret" lines; names the consumer
	Body    = "body"    // masks "card":"…" in the request body; appends "\n-- filtered\n" to the response body
	Callout = "callout" // asks upstream <config> GET /check<path>: 200 goes on with x-auth: <body>, else 403
	// Contexts answers x-path: the request's :path, kept in its context meanwhile; a
	// request with x-trap traps.
	Contexts = "contexts"

	Loop       = "loop"        // never returns from proxy_on_request_headers
	GrowBomb   = "growbomb"    // grows its memory until refused, then traps
	Recursion  = "recursion"   // recurses without end
	Trap       = "trap"        // unreachable in proxy_on_request_headers
	BadPtr     = "badptr"      // calls proxy_log with a pointer outside its memory
	HugeHdrs   = "hugeheaders" // adds headers without end
	WatNoop    = "watnoop"     // the no-op filter in WAT: the smallest valid module
	WatHeaders = "watheaders"  // Headers in WAT
	WatDeny    = "watdeny"     // Deny in WAT: 403 "denied by function" and x-denied-by: wat
	// Nested recurses 100 deep, leaving its frames every way a function can, and
	// answers x-depth: 100.
	Nested = "nested"
)

// Dir is the guests' source directory.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata", "guests")
}

var (
	mu     sync.Mutex
	built  = map[string][]byte{}
	wabtMu sync.Mutex
)

// Build returns the named guest compiled to Wasm, building it once per test process.
func Build(t testing.TB, name string) []byte {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if b, ok := built[name]; ok {
		return b
	}
	var b []byte
	var err error
	if _, serr := os.Stat(filepath.Join(Dir(), name+".wat")); serr == nil {
		b, err = buildWAT(filepath.Join(Dir(), name+".wat"))
	} else {
		b, err = buildGo(name)
	}
	if err != nil {
		t.Fatalf("functiontest: build guest %s: %v", name, err)
	}
	built[name] = b
	return b
}

func buildGo(name string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "fnguest-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, name+".wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, "./"+name)
	cmd.Dir = Dir()
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOWORK=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%v: %s", err, stderr.String())
	}
	return os.ReadFile(out)
}

// WAT compiles WebAssembly text with wat2wasm, for tests that write their own guest.
func WAT(t testing.TB, src string) []byte {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "guest.wat")
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := buildWAT(p)
	if err != nil {
		t.Fatalf("functiontest: %v", err)
	}
	return b
}

func buildWAT(path string) ([]byte, error) {
	if err := ensureWABT(); err != nil {
		return nil, err
	}
	out := path + ".wasm"
	if dir, err := os.MkdirTemp("", "fnwat-"); err == nil {
		defer os.RemoveAll(dir)
		out = filepath.Join(dir, "guest.wasm")
	}
	cmd := exec.Command("wat2wasm", "-o", out, path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("wat2wasm %s: %v: %s", filepath.Base(path), err, stderr.String())
	}
	return os.ReadFile(out)
}

// ensureWABT installs Debian's wabt when wat2wasm is missing: a fresh machine of the
// project's kind gets what the tests need, as the browser tests do with Chromium.
func ensureWABT() error {
	wabtMu.Lock()
	defer wabtMu.Unlock()
	if _, err := exec.LookPath("wat2wasm"); err == nil {
		return nil
	}
	if err := aptget.Install("functiontest", "wabt"); err != nil {
		return fmt.Errorf("wat2wasm is missing: %v", err)
	}
	_, err := exec.LookPath("wat2wasm")
	return err
}
