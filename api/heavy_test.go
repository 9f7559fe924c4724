package api_test

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"tollgate/api"
)

// TestHeavyCallsPerTenant: concurrent imports by one tenant past its cap are 429
// rate_limited with Retry-After, while another tenant's calls are served.
func TestHeavyCallsPerTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *api.Config) { c.HeavyCalls = 1 })
	e.tenant("acme")
	e.tenant("other")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = e.srv.Serve(ln) }()
	base := "http://" + ln.Addr().String()
	body, _ := json.Marshal(importBody(petsDoc(""), "dry_run", true))
	var refused, served, otherBad atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 30 && refused.Load() == 0; j++ {
				req, _ := http.NewRequest("POST", base+"/v1/tenants/acme/routes:import", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+adminToken)
				req.Header.Set("Content-Type", "application/json")
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				var env struct {
					Error struct{ Code, RequestID string }
				}
				_ = json.NewDecoder(res.Body).Decode(&env)
				res.Body.Close()
				switch {
				case res.StatusCode == 429 && res.Header.Get("Retry-After") != "" && env.Error.Code == "rate_limited":
					refused.Add(1)
				case res.StatusCode == 200:
					served.Add(1)
				default:
					t.Errorf("import: %d %+v", res.StatusCode, env)
				}
				req, _ = http.NewRequest("GET", base+"/v1/tenants/other/routes", nil)
				req.Header.Set("Authorization", "Bearer "+adminToken)
				if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 200 {
					otherBad.Add(1)
				} else {
					res.Body.Close()
				}
			}
		}()
	}
	wg.Wait()
	if refused.Load() == 0 || served.Load() == 0 || otherBad.Load() != 0 {
		t.Errorf("refused %d, served %d, other tenant's failures %d", refused.Load(), served.Load(), otherBad.Load())
	}
}
