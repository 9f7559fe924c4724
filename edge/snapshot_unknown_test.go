package edge_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tollgate/edge/configfile"
	"tollgate/tenants"
)

// An edge restarted on a snapshot it could not keep current (its writes failed on a full
// disk, so it is older than the refresh interval) says so on /readyz, and answers a
// tenant the snapshot lacks — created after its last good write — 503 not_ready with
// Retry-After, not 404 tenant_not_found, until the bucket's load is in; after that an
// unknown host is a 404 again.
func TestStaleSnapshotUnknownTenantNotReady(t *testing.T) {
	dir := t.TempDir()
	up := newUpstream(t, "up")
	tk, tv := entryOf(t, &tenants.Tenant{ID: "t-acme", Slug: "acme", Name: "acme"}, 1)
	rk, rv := entryOf(t, &tenants.Route{ID: "r1", TenantID: "t-acme", Name: "r1", Paths: []string{"/hello"},
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: up.URL, Weight: 1}}}}, 2)
	b, err := configfile.Encode(&configfile.Contents{Bucket: "tollgate_config", AsOf: time.Now().Add(-20 * time.Minute),
		Entries: []configfile.Entry{{Key: tk, Revision: 1, Value: tv}, {Key: rk, Revision: 2, Value: rv}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, configfile.Name), b, 0o600); err != nil {
		t.Fatal(err)
	}

	h := newHarness(t)
	f := openConfigFile(t, dir, h.e.Apply, func(c *configfile.Config) { c.Registry = h.reg; c.Refresh = 5 * time.Minute })
	h.e.UseConfigFile(f)
	if ok, err := f.Restore(time.Hour); !ok {
		t.Fatal(err)
	}
	h.e.Loaded()
	if r := h.get("acme."+domain, "/hello"); r.status != 200 {
		t.Fatalf("a tenant of the snapshot: %d %s", r.status, r.body)
	}
	r := h.get("newco."+domain, "/hello")
	if r.status != 503 || r.errCode() != tenants.ENotReady || r.header.Get("Retry-After") == "" || !strings.Contains(r.body, `"request_id":"`) {
		t.Fatalf("a tenant the snapshot lacks: %d Retry-After %q %s; want 503 not_ready with Retry-After", r.status, r.header.Get("Retry-After"), r.body)
	}
	rz := readyzStale(t, h)
	if !rz.stale || !strings.Contains(rz.message, "STALE") || !strings.Contains(rz.message, "503 not_ready") {
		t.Fatalf("/readyz does not say the snapshot is stale: %+v", rz)
	}

	// The bucket's load: newco exists there.
	nk, nv := entryOf(t, &tenants.Tenant{ID: "t-newco", Slug: "newco", Name: "newco"}, 3)
	nrk, nrv := entryOf(t, &tenants.Route{ID: "r2", TenantID: "t-newco", Name: "r2", Paths: []string{"/hello"},
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: up.URL, Weight: 1}}}}, 4)
	for _, e := range [][2]any{{tk, tv}, {rk, rv}, {nk, nv}, {nrk, nrv}} {
		f.Update(e[0].(string), e[1].([]byte), 5)
	}
	f.Current()
	waitFor(t, 10*time.Second, func() string {
		if r := h.get("newco."+domain, "/hello"); r.status != 200 {
			return "newco after the load: " + r.body
		}
		return ""
	})
	if r := h.get("nobody."+domain, "/hello"); r.status != 404 || r.errCode() != tenants.ETenantNotFound {
		t.Fatalf("an unknown tenant once current: %d %s, want 404 tenant_not_found", r.status, r.body)
	}
	if rz := readyzStale(t, h); rz.stale {
		t.Fatalf("/readyz still says stale once current: %+v", rz)
	}
}

type staleView struct {
	stale   bool
	message string
}

func readyzStale(t *testing.T, h *harness) staleView {
	t.Helper()
	rz := readyz(t, h)
	var v staleView
	v.message = rz.Config.Message
	v.stale = rz.Config.Stale
	return v
}
