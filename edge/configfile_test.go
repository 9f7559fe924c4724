package edge_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tollgate/edge/configfile"
	"tollgate/tenants"
)

// openConfigFile opens the config file in dir, passing what it loads to apply.
func openConfigFile(t *testing.T, dir string, apply func(string, []byte, uint64), opts ...func(*configfile.Config)) *configfile.File {
	t.Helper()
	cfg := configfile.Config{Dir: dir, Bucket: "tollgate_config", Apply: apply, Debounce: time.Millisecond}
	for _, o := range opts {
		o(&cfg)
	}
	f, err := configfile.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// An edge serving a snapshot says so on /readyz and in its metrics, and stops saying so
// once it has caught up.
func TestReadyzSaysConfigFromSnapshot(t *testing.T) {
	dir := t.TempDir()
	up := newUpstream(t, "up")
	tenantKey, tenantVal := entryOf(t, &tenants.Tenant{ID: "t-acme", Slug: "acme", Name: "acme"}, 1)
	routeKey, routeVal := entryOf(t, &tenants.Route{ID: "r1", TenantID: "t-acme", Name: "r1", Paths: []string{"/hello"},
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: up.URL, Weight: 1}}}}, 2)
	b, err := configfile.Encode(&configfile.Contents{Bucket: "tollgate_config", AsOf: time.Now().Add(-90 * time.Second),
		Entries: []configfile.Entry{{Key: tenantKey, Revision: 1, Value: tenantVal}, {Key: routeKey, Revision: 2, Value: routeVal}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, configfile.Name), b, 0o600); err != nil {
		t.Fatal(err)
	}

	h := newHarness(t)
	f := openConfigFile(t, dir, h.e.Apply, func(c *configfile.Config) { c.Registry = h.reg })
	h.e.UseConfigFile(f)
	if ok, err := f.Restore(time.Hour); !ok {
		t.Fatal(err)
	}
	h.e.Loaded()
	if r := h.get("acme."+domain, "/hello"); r.status != 200 {
		t.Fatalf("GET /hello from the snapshot: %d %s", r.status, r.body)
	}
	rz := readyz(t, h)
	if rz.Config.Source != "snapshot" || !strings.HasPrefix(rz.Config.Message, "config from snapshot, age 1m3") || rz.Config.AgeSeconds < 90 {
		t.Fatalf("/readyz config %+v", rz.Config)
	}
	if v := h.metric("tollgate_edge_config_snapshot_serving", nil); v != 1 {
		t.Fatalf("tollgate_edge_config_snapshot_serving %v, want 1", v)
	}
	if v := h.metric("tollgate_edge_config_snapshot_age_seconds", nil); v < 90 {
		t.Fatalf("tollgate_edge_config_snapshot_age_seconds %v, want ≥ 90", v)
	}

	// The bucket's initial load: the tenant, and no route any more.
	f.Update(tenantKey, tenantVal, 1)
	f.Current()
	if rz := readyz(t, h); rz.Config.Source != "nats" || rz.Config.Message != "" {
		t.Fatalf("/readyz config after catching up %+v", rz.Config)
	}
	if v := h.metric("tollgate_edge_config_snapshot_serving", nil); v != 0 {
		t.Fatalf("tollgate_edge_config_snapshot_serving %v after catching up, want 0", v)
	}
	waitFor(t, 10*time.Second, func() string {
		if r := h.get("acme."+domain, "/hello"); r.status != 404 {
			return "the vanished route still answers " + string(r.body)
		}
		return ""
	})
}

type readyzBody struct {
	Status string `json:"status"`
	Config struct {
		Source     string  `json:"source"`
		Message    string  `json:"message"`
		AgeSeconds float64 `json:"age_seconds"`
		Stale      bool    `json:"stale"`
	} `json:"config"`
}

func readyz(t *testing.T, h *harness) readyzBody {
	t.Helper()
	resp, err := http.Get("http://" + h.admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var rz readyzBody
	if resp.StatusCode != 200 || json.Unmarshal(raw, &rz) != nil || rz.Status != "ready" {
		t.Fatalf("/readyz: %d %s", resp.StatusCode, raw)
	}
	return rz
}

// entryOf is obj's KV key and value at rev.
func entryOf(t *testing.T, obj any, rev int64) (string, []byte) {
	t.Helper()
	e := tenants.Entry{Rev: rev}
	switch o := obj.(type) {
	case *tenants.Tenant:
		e.Tenant = o
	case *tenants.Route:
		e.Route = o
	}
	key, err := e.EntryKey()
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(&e)
	if err != nil {
		t.Fatal(err)
	}
	return key, b
}
