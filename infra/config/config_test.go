package config_test

import (
	"strings"
	"testing"

	"tollgate/infra/config"
)

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

// TestTrustSettings: the mail, DNS proof and cache settings take their defaults, and a bad value
// stops the process with a message naming the variable (and never a password).
func TestTrustSettings(t *testing.T) {
	c, err := config.FromEnv(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.SMTPURL != "" || c.SMTPFrom != "Tollgate <no-reply@localhost>" || c.PublicURL != "http://127.0.0.1:8080" ||
		c.DNSResolver != "" || c.EdgeCacheBytes != config.DefaultEdgeCacheBytes || c.EdgeHTTP2MaxStreams != 250 || c.EdgeHTTP2HeaderTable != 0 {
		t.Fatalf("defaults: %+v", c)
	}
	c, err = config.FromEnv(env(map[string]string{
		"TOLLGATE_SMTP_URL": "smtp://u:p@mail.example.com:587", "TOLLGATE_SMTP_FROM": "Ops <ops@example.com>",
		"TOLLGATE_PUBLIC_URL": "https://console.example.com/", "TOLLGATE_DNS_RESOLVER": "127.0.0.1:5353",
		"TOLLGATE_EDGE_CACHE_BYTES": "0", "TOLLGATE_EDGE_HTTP2_MAX_STREAMS": "100",
		"TOLLGATE_EDGE_HTTP2_HEADER_TABLE": "4096",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.PublicURL != "https://console.example.com" || c.EdgeCacheBytes != 0 || c.DNSResolver != "127.0.0.1:5353" || c.EdgeHTTP2MaxStreams != 100 ||
		c.EdgeHTTP2HeaderTable != 4096 {
		t.Fatalf("set: %+v", c)
	}
	for _, tc := range []struct{ name, value, want string }{
		{"TOLLGATE_SMTP_URL", "mail.example.com:25", "TOLLGATE_SMTP_URL"},
		{"TOLLGATE_SMTP_URL", "http://mail.example.com:25", "not smtp://"},
		{"TOLLGATE_SMTP_URL", "smtp://u:secret@mail.example.com", "not smtp://"},
		{"TOLLGATE_SMTP_FROM", "not an address", "TOLLGATE_SMTP_FROM"},
		{"TOLLGATE_PUBLIC_URL", "console.example.com", "TOLLGATE_PUBLIC_URL"},
		{"TOLLGATE_PUBLIC_URL", "javascript:alert(1)", "TOLLGATE_PUBLIC_URL"},
		{"TOLLGATE_DNS_RESOLVER", "127.0.0.1", "host:port"},
		{"TOLLGATE_EDGE_CACHE_BYTES", "-1", "TOLLGATE_EDGE_CACHE_BYTES"},
		{"TOLLGATE_EDGE_CACHE_BYTES", "256MiB", "byte count"},
		{"TOLLGATE_EDGE_HTTP2_MAX_STREAMS", "0", "between 1 and 10000"},
		{"TOLLGATE_EDGE_HTTP2_MAX_STREAMS", "many", "TOLLGATE_EDGE_HTTP2_MAX_STREAMS"},
		{"TOLLGATE_EDGE_HTTP2_HEADER_TABLE", "65537", "between 0 and 65536"},
		{"TOLLGATE_EDGE_HTTP2_HEADER_TABLE", "4KiB", "TOLLGATE_EDGE_HTTP2_HEADER_TABLE"},
		{"TOLLGATE_DOMAIN_RECHECK", "1ms", "between 10ms and 24h"},
		{"TOLLGATE_DOMAIN_CHECK_MIN", "soon", "TOLLGATE_DOMAIN_CHECK_MIN"},
	} {
		_, err := config.FromEnv(env(map[string]string{tc.name: tc.value}))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%q: got %v, want an error with %q", tc.name, tc.value, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s=%q: the error shows the password: %v", tc.name, tc.value, err)
		}
	}
}

// The edge's performance switches have their defaults (on, but for the short-read wait,
// which does not pay here), take on/off (and true/false, 1/0) in any case, and refuse
// anything else naming the variable.
func TestEdgeSwitches(t *testing.T) {
	switches := map[string]struct {
		get func(*config.Config) bool
		def bool
	}{
		"TOLLGATE_EDGE_RAW_IO":                          {func(c *config.Config) bool { return c.EdgeRawIO }, true},
		"TOLLGATE_EDGE_HTTP2":                           {func(c *config.Config) bool { return c.EdgeHTTP2 }, true},
		"TOLLGATE_EDGE_H2_UPSTREAM_OWN_CLIENT":          {func(c *config.Config) bool { return c.EdgeH2UpstreamOwnClient }, true},
		"TOLLGATE_EDGE_YIELD_READS":                     {func(c *config.Config) bool { return c.EdgeYieldReads }, true},
		"TOLLGATE_EDGE_SHORT_READ_WAIT":                 {func(c *config.Config) bool { return c.EdgeShortReadWait }, false},
		"TOLLGATE_EDGE_REUSE_CHECK":                     {func(c *config.Config) bool { return c.EdgeReuseCheck }, true},
		"TOLLGATE_EDGE_JSON_ONE_PASS":                   {func(c *config.Config) bool { return c.EdgeJSONOnePass }, true},
		"TOLLGATE_EDGE_FUNCTION_SKIP_IDLE_CAP":          {func(c *config.Config) bool { return c.EdgeFunctionSkipIdleCap }, true},
		"TOLLGATE_EDGE_FUNCTION_END_WITH_LAST_CALLBACK": {func(c *config.Config) bool { return c.EdgeFunctionEndWithLastCallback }, true},
		"TOLLGATE_EDGE_FUNCTION_MERGED_ENTRIES":         {func(c *config.Config) bool { return c.EdgeFunctionMergedEntries }, true},
		"TOLLGATE_EDGE_KEY_LAST_USE":                    {func(c *config.Config) bool { return c.EdgeKeyLastUse }, true},
		"TOLLGATE_METER_SPARSE_LATENCY":                 {func(c *config.Config) bool { return c.MeterSparseLatency }, true},
		"TOLLGATE_EDGE_RETURN_MEMORY":                   {func(c *config.Config) bool { return c.EdgeReturnMemory }, true},
		"TOLLGATE_EDGE_RETURN_ASIDE":                    {func(c *config.Config) bool { return c.EdgeReturnAside }, true},
		"TOLLGATE_EDGE_PACK_CONFIG":                     {func(c *config.Config) bool { return c.EdgePackConfig }, true},
		"TOLLGATE_EDGE_SNAPSHOT_YIELD":                  {func(c *config.Config) bool { return c.EdgeSnapshotYield }, true},
		"TOLLGATE_EDGE_INCREMENTAL":                     {func(c *config.Config) bool { return c.EdgeIncremental }, true},
		"TOLLGATE_EDGE_SHARE_UPSTREAMS":                 {func(c *config.Config) bool { return c.EdgeShareUpstreams }, true},
		"TOLLGATE_EDGE_PARALLEL_COMPILES":               {func(c *config.Config) bool { return c.EdgeParallelCompiles }, true},
		"TOLLGATE_METER_SPOOL_RESERVE":                  {func(c *config.Config) bool { return c.MeterSpoolReserve }, true},
	}
	for name, sw := range switches {
		get := sw.get
		for value, want := range map[string]bool{"": sw.def, "on": true, "OFF": false, "false": false, "1": true} {
			c, err := config.FromEnv(env(map[string]string{name: value}))
			if err != nil || get(c) != want {
				t.Errorf("%s=%q: %v, err %v; want %v", name, value, err == nil && get(c), err, want)
			}
		}
		if _, err := config.FromEnv(env(map[string]string{name: "sometimes"})); err == nil || !strings.HasPrefix(err.Error(), name+":") {
			t.Errorf("%s=sometimes: err %v; want one naming the variable", name, err)
		}
	}
}

// TestEdgeConfigStore: the config store's mode and budget are read, and a bad value is
// refused at start.
func TestEdgeConfigStore(t *testing.T) {
	c, err := config.FromEnv(env(nil))
	if err != nil || c.EdgeConfigStore != "memory" || c.EdgeTenantMemory != 128<<20 {
		t.Fatalf("defaults: %q %d %v", c.EdgeConfigStore, c.EdgeTenantMemory, err)
	}
	c, err = config.FromEnv(env(map[string]string{"TOLLGATE_EDGE_CONFIG_STORE": "disk", "TOLLGATE_EDGE_TENANT_MEMORY": "256MiB"}))
	if err != nil || c.EdgeConfigStore != "disk" || c.EdgeTenantMemory != 256<<20 {
		t.Fatalf("disk, 256MiB: %q %d %v", c.EdgeConfigStore, c.EdgeTenantMemory, err)
	}
	if c, err = config.FromEnv(env(map[string]string{"TOLLGATE_EDGE_TENANT_MEMORY": "3000000"})); err != nil || c.EdgeTenantMemory != 3000000 {
		t.Fatalf("a byte count: %d %v", c.EdgeTenantMemory, err)
	}
	for _, kv := range [][2]string{
		{"TOLLGATE_EDGE_CONFIG_STORE", "pebble"},
		{"TOLLGATE_EDGE_TENANT_MEMORY", "lots"},
		{"TOLLGATE_EDGE_TENANT_MEMORY", "12KiB"},
		{"TOLLGATE_EDGE_TENANT_MEMORY", "-5MiB"},
	} {
		if _, err := config.FromEnv(env(map[string]string{kv[0]: kv[1]})); err == nil || !strings.Contains(err.Error(), kv[0]) {
			t.Errorf("%s=%s: %v, want refused", kv[0], kv[1], err)
		}
	}
}
