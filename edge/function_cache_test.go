package edge_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"tollgate/edge/fnchain"
	"tollgate/infra/functionstore"
	"tollgate/tenants"
)

// The edge's disk cache keeps the modules its routes name, and those no route has named
// for the grace period go: at start (once the edge has its config, by the time a sweep
// last saw them named, which survives the restart) and then while it runs, once a route
// stops naming one. A route that names a removed module again still gets it.
func TestFunctionCacheSweep(t *testing.T) {
	const grace = 2 * time.Second
	env := newFnEnv(t)
	dir := filepath.Join(env.dir, "modules")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	modA, modB, modOld, modFresh := tinyModule(1), tinyModule(2), tinyModule(3), tinyModule(4)
	shaA, shaB := env.put(modA), env.put(modB)
	shaOld, shaFresh := functionstore.Digest(modOld), functionstore.Digest(modFresh)
	file := func(sha string) string { return filepath.Join(dir, sha+".wasm") }
	longAgo := time.Now().Add(-time.Hour)
	// Left by an earlier run: A, named by a route, last seen named an hour ago; a module
	// no route names, as old; one no route names, written just now; a torn fetch.
	for sha, m := range map[string][]byte{shaA: modA, shaOld: modOld, shaFresh: modFresh} {
		if err := os.WriteFile(file(sha), m, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	torn := filepath.Join(dir, ".module-123")
	if err := os.WriteFile(torn, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{file(shaA), file(shaOld), torn} {
		if err := os.Chtimes(p, longAgo, longAgo); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(p string) bool {
		_, err := os.Stat(p)
		return err == nil
	}

	h := newHarness(t, env.config(func(c *fnchain.Config) { c.CacheGrace = grace }))
	up := newUpstream(t, "up")
	acme := h.tenant("acme")
	h.fnRoute(acme, "ra", "/a", tenants.AuthNone, []tenants.FunctionRef{{Name: "a", SHA256: shaA}}, up.URL)
	h.fnRoute(acme, "rb", "/b", tenants.AuthNone, []tenants.FunctionRef{{Name: "b", SHA256: shaB}}, up.URL)
	// Before the config is loaded every module would look unused: nothing goes yet.
	if !exists(file(shaA)) || !exists(file(shaOld)) {
		t.Fatal("the cache was swept before the edge had its config")
	}
	h.e.Loaded()
	host := "acme." + domain
	for _, p := range []string{"/a", "/b"} {
		if r := h.get(host, p); r.status != 200 {
			t.Fatalf("%s: %v", p, r)
		}
	}
	waitFor(t, grace, func() string {
		if exists(file(shaOld)) || exists(torn) {
			return "the module no route names, and the torn fetch, are still in the cache after the start"
		}
		return ""
	})
	for _, sha := range []string{shaA, shaB, shaFresh} {
		if !exists(file(sha)) {
			t.Fatalf("%s.wasm went at the start", sha)
		}
	}
	if info, err := os.Stat(file(shaA)); err != nil || time.Since(info.ModTime()) > time.Minute {
		t.Fatalf("A, named by a route, was not marked as seen named: %v, %v", info, err)
	}

	// B's route goes: B's file goes after the grace, and the unnamed fresh one with it;
	// A's stays however long it has been on disk.
	h.del(tenants.ObjectKey(acme, tenants.KindRoute, "rb"))
	waitFor(t, 4*grace, func() string {
		if exists(file(shaB)) || exists(file(shaFresh)) {
			return "B's module and the fresh unnamed one are still in the cache"
		}
		return ""
	})
	if !exists(file(shaA)) {
		t.Fatal("A's module went while its route names it")
	}
	if r := h.get(host, "/a"); r.status != 200 {
		t.Fatalf("/a after the sweep: %v", r)
	}
	// B named again: the edge still has it, in memory (or from the store after a restart).
	h.fnRoute(acme, "rb2", "/b2", tenants.AuthNone, []tenants.FunctionRef{{Name: "b", SHA256: shaB}}, up.URL)
	waitFor(t, 2*time.Second, func() string {
		if r := h.get(host, "/b2"); r.status != 200 {
			return r.String()
		}
		return ""
	})
}
