package edge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tollgate/edge"
	"tollgate/edge/fnchain"
	"tollgate/infra/functionstore"
	"tollgate/infra/testenv"
	"tollgate/tenants"
)

// fnEnv is a module store and a function log subject on the machine's NATS, each the
// test's own, and the edge settings that use them.
type fnEnv struct {
	t      testing.TB
	nc     *nats.Conn
	store  *functionstore.Store
	prefix string
	dir    string // the edge's function cache dir

	mu   sync.Mutex
	logs []fnchain.LogLine
}

func newFnEnv(t testing.TB) *fnEnv {
	t.Helper()
	url := os.Getenv("TOLLGATE_TEST_NATS_URL")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	nc, err := nats.Connect(url, nats.Timeout(2*time.Second))
	if err != nil {
		t.Fatalf("no NATS server at %s (start it: bash .ci/services): %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	env := &fnEnv{t: t, nc: nc, prefix: testenv.Name("tgtest_"), dir: t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bucket := functionstore.BucketName(env.prefix)
	if env.store, err = functionstore.Open(ctx, js, bucket, 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteObjectStore(ctx, bucket)
	})
	sub, err := nc.Subscribe(env.prefix+".fnlog.>", func(m *nats.Msg) {
		var l fnchain.LogLine
		if json.Unmarshal(m.Data, &l) == nil {
			env.mu.Lock()
			env.logs = append(env.logs, l)
			env.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return env
}

// config points an edge at the env's store, log subject and cache dir.
func (env *fnEnv) config(mod func(*fnchain.Config)) func(*edge.Config) {
	return func(c *edge.Config) {
		c.Functions = fnchain.Config{
			Source:     env.store,
			CacheDir:   env.dir,
			Publish:    env.nc.Publish,
			LogSubject: env.prefix + ".fnlog",
		}
		if mod != nil {
			mod(&c.Functions)
		}
	}
}

// put uploads a module and returns its digest.
func (env *fnEnv) put(module []byte) string {
	env.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sha, err := env.store.Put(ctx, module)
	if err != nil {
		env.t.Fatal(err)
	}
	return sha
}

// logLine waits for a function log line of tenantID whose message contains want.
func (env *fnEnv) logLine(tenantID, want string) fnchain.LogLine {
	env.t.Helper()
	var found fnchain.LogLine
	waitFor(env.t, 5*time.Second, func() string {
		env.mu.Lock()
		defer env.mu.Unlock()
		for _, l := range env.logs {
			if l.TenantID == tenantID && strings.Contains(l.Message, want) {
				found = l
				return ""
			}
		}
		return fmt.Sprintf("no log line of %s with %q among %d", tenantID, want, len(env.logs))
	})
	return found
}

// fnRoute files a route with functions.
func (h *harness) fnRoute(tenantID, id, path, auth string, fns []tenants.FunctionRef, upstream string) *tenants.Route {
	r := &tenants.Route{ID: id, TenantID: tenantID, Name: id, Paths: []string{path}, Auth: auth, Functions: fns,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: upstream, Weight: 1}}}}
	h.put(r)
	return r
}

// tinyModule is a minimal proxy-wasm filter that does nothing, made distinct by n (a
// custom section): enough to fill an edge with modules without a compiler per module.
func tinyModule(n int) []byte {
	sec := func(id byte, body ...byte) []byte { return append([]byte{id, byte(len(body))}, body...) }
	str := func(s string) []byte { return append([]byte{byte(len(s))}, s...) }
	exp := func(name string, kind, idx byte) []byte { return append(str(name), kind, idx) }
	var b []byte
	b = append(b, 0, 'a', 's', 'm', 1, 0, 0, 0)
	b = append(b, sec(1, 4,
		0x60, 0, 0, // () -> ()
		0x60, 2, 0x7f, 0x7f, 0, // (i32, i32) -> ()
		0x60, 1, 0x7f, 1, 0x7f, // (i32) -> i32
		0x60, 3, 0x7f, 0x7f, 0x7f, 1, 0x7f, // (i32, i32, i32) -> i32
	)...)
	b = append(b, sec(3, 4, 0, 1, 2, 3)...)
	b = append(b, sec(5, 1, 0, 2)...) // one memory, 2 pages minimum
	var exports []byte
	exports = append(exports, 5)
	exports = append(exports, exp("memory", 2, 0)...)
	exports = append(exports, exp("proxy_abi_version_0_2_1", 0, 0)...)
	exports = append(exports, exp("proxy_on_context_create", 0, 1)...)
	exports = append(exports, exp("proxy_on_memory_allocate", 0, 2)...)
	exports = append(exports, exp("proxy_on_request_headers", 0, 3)...)
	b = append(b, sec(7, exports...)...)
	b = append(b, sec(10, 4,
		2, 0, 0x0b, // abi version
		2, 0, 0x0b, // context create
		6, 0, 0x41, 0x80, 0x80, 0x04, 0x0b, // allocate: i32.const 65536 (the second page)
		4, 0, 0x41, 0, 0x0b, // request headers: Continue
	)...)
	b = append(b, sec(0, append(str("tollgate-test"), []byte(fmt.Sprint(n))...)...)...)
	return b
}

// A route names a module the edge has not got: it answers 503 function_unavailable (never
// skipping the function) until the module is in the store, then serves within 2 s.
func TestFunctionModuleArrives(t *testing.T) {
	env := newFnEnv(t)
	h := newHarness(t, env.config(nil))
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	mod := tinyModule(1)
	sha := functionstore.Digest(mod)
	h.fnRoute(acme, "r", "/r", tenants.AuthNone, []tenants.FunctionRef{{Name: "noop", SHA256: sha}}, up.URL)
	h.e.Loaded()
	host := "acme." + domain
	if r := h.get(host, "/r"); r.status != 503 || r.errCode() != tenants.EFunctionUnavailable {
		t.Fatalf("before upload: %v, want 503 function_unavailable", r)
	}
	if up.hits.Load() != 0 {
		t.Fatal("the request went upstream without its function")
	}
	env.logLine(acme, "not available")
	start := time.Now()
	env.put(mod)
	waitFor(t, 2*time.Second, func() string {
		if r := h.get(host, "/r"); r.status != 200 {
			return r.String()
		}
		return ""
	})
	t.Logf("the module reached the edge %v after its upload", time.Since(start).Round(time.Millisecond))
	if _, err := os.Stat(filepath.Join(env.dir, "modules", sha+".wasm")); err != nil {
		t.Errorf("the module is not in the edge's disk cache: %v", err)
	}
}

// An edge restarted without its module store serves every module it had from its disk
// cache: 1,000 of them (one route each) load in well under 5 s.
func TestFunctionColdStartFromDisk(t *testing.T) {
	env := newFnEnv(t)
	const n = 1000
	up := newUpstream(t, "up")
	routes := make([]*tenants.Route, n)
	for i := range routes {
		mod := tinyModule(i)
		routes[i] = &tenants.Route{ID: fmt.Sprintf("r%04d", i), TenantID: "t-acme", Name: fmt.Sprintf("r%04d", i),
			Paths: []string{fmt.Sprintf("/r%d", i)}, Functions: []tenants.FunctionRef{{Name: "f", SHA256: env.put(mod)}},
			Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: up.URL, Weight: 1}}}}
	}
	load := func(src fnchain.Source) (*harness, time.Duration) {
		h := newHarness(t, env.config(func(c *fnchain.Config) { c.Source = src }))
		h.tenant("acme")
		for _, r := range routes {
			h.put(r)
		}
		start := time.Now()
		h.e.Loaded()
		return h, time.Since(start)
	}
	_, warmup := load(env.store) // fetches every module and fills the disk cache
	h, took := load(nil)         // no store: disk only
	t.Logf("%d modules: first load (fetching) %v, restart from disk %v", n, warmup.Round(time.Millisecond), took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("an edge with %d modules on disk took %v to load, want under 5s", n, took)
	}
	for _, i := range []int{0, n / 2, n - 1} {
		if r := h.get("acme."+domain, fmt.Sprintf("/r%d", i)); r.status != 200 {
			t.Errorf("/r%d after the restart: %v", i, r)
		}
	}
}
