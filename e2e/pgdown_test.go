package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"tollgate/infra/testenv"
	"tollgate/tenants"
)

// TestAPIWithPostgresDown runs the api on a Postgres of the test's own, stops it and then
// freezes it (SIGSTOP: connections are accepted and never answered). Meanwhile every api
// request is answered 503 not_ready with Retry-After within the database bound
// (TOLLGATE_DB_TIMEOUT, 1 s here) plus a margin of 1 s, /readyz fails and /healthz does not, the edge keeps
// serving its config, and the console's pages answer 503 too; once Postgres is back the api answers again and its relay delivers
// the next change to the edge.
func TestAPIWithPostgresDown(t *testing.T) {
	t.Parallel()
	const (
		bound = time.Second
		// margin is what the answer may take beyond the bound: writing the 503 and, for
		// the requests that queued for a pooled connection, the queueing itself (which
		// shares the request's deadline). Measured: 6 ms at most, 16 requests at once on
		// a frozen server; the rest is room for a race-built api on a busy 2-core machine.
		margin = time.Second
	)
	pg := testenv.StartPostgres(t)
	s := newStack(t)
	s.dbURL = pg.CreateDatabase("tollgate")
	adminAddr := freeAddr(t)
	_, api := s.startAPI("TOLLGATE_DB_TIMEOUT="+bound.String(), "TOLLGATE_API_ADMIN_ADDR="+adminAddr)
	_, edge := s.startEdge()
	t.Cleanup(edge.close)
	up := echoUpstream(t, "pg-up")
	api.createTenant("pgd")
	api.createRoute("pgd", routeSpec("before", "/before", up.URL, "none"))
	eventually(t, 30*time.Second, "the edge serves /before", served(edge, "pgd", "/before", ""))

	probe := &http.Client{Timeout: 30 * time.Second}
	status := func(url string) int {
		res, err := probe.Get(url)
		if err != nil {
			return 0
		}
		res.Body.Close()
		return res.StatusCode
	}
	var figures []string
	// notReady sends a request and checks the answer is 503 not_ready with Retry-After,
	// given within the bound plus the margin; it returns how long the answer took.
	notReady := func(method, path string, body any) (time.Duration, error) {
		start := time.Now()
		r, err := api.try(method, path, body)
		took := time.Since(start)
		if err != nil {
			return took, fmt.Errorf("%s %s: %w", method, path, err)
		}
		code := ""
		if e, ok := r.Body["error"].(map[string]any); ok {
			code, _ = e["code"].(string)
		}
		if r.Status != 503 || code != "not_ready" || r.Header.Get("Retry-After") == "" {
			return took, fmt.Errorf("%s %s: %s (Retry-After %q), want 503 not_ready with Retry-After", method, path, r, r.Header.Get("Retry-After"))
		}
		if took > bound+margin {
			return took, fmt.Errorf("%s %s: answered after %v, past the bound %v and its margin %v", method, path, took, bound, margin)
		}
		return took, nil
	}
	mustNotReady := func(method, path string, body any) time.Duration {
		t.Helper()
		took, err := notReady(method, path, body)
		if err != nil {
			t.Fatal(err)
		}
		return took
	}

	for _, fault := range []struct {
		name         string
		down, repair func()
	}{
		{"stopped", pg.Stop, pg.Start},
		{"frozen", pg.Freeze, pg.Thaw},
	} {
		fault.down()
		read := mustNotReady("GET", "/v1/tenants/pgd", nil)
		write := mustNotReady("POST", "/v1/tenants/pgd/routes", routeSpec("lost-"+fault.name, "/lost-"+fault.name, up.URL, "none"))
		// More requests at once than the pool has connections: the ones waiting for a
		// connection are bounded too.
		var wg sync.WaitGroup
		burst := make([]time.Duration, 16)
		errs := make([]error, len(burst))
		for i := range burst {
			wg.Go(func() { burst[i], errs[i] = notReady("GET", "/v1/tenants/pgd/routes", nil) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("Postgres %s, %d requests at once: %v", fault.name, len(burst), err)
		}
		// The console's pages share the api's bound: a session to look up gets the
		// console's 503 page.
		req, _ := http.NewRequest("GET", api.base+"/console/", nil)
		req.AddCookie(&http.Cookie{Name: tenants.SessionCookie, Value: "s-unknown"})
		res, err := probe.Do(req)
		if err != nil {
			t.Fatalf("Postgres %s: console: %v", fault.name, err)
		}
		res.Body.Close()
		if res.StatusCode != 503 || res.Header.Get("Retry-After") == "" {
			t.Fatalf("Postgres %s: the console answered %d (Retry-After %q), want 503 with Retry-After", fault.name, res.StatusCode, res.Header.Get("Retry-After"))
		}
		if got := status(api.base + "/readyz"); got != 503 {
			t.Fatalf("Postgres %s: api /readyz answered %d, want 503", fault.name, got)
		}
		if got := status("http://" + adminAddr + "/readyz"); got != 503 {
			t.Fatalf("Postgres %s: api admin /readyz answered %d, want 503", fault.name, got)
		}
		if got := status(api.base + "/healthz"); got != 200 {
			t.Fatalf("Postgres %s: api /healthz answered %d, want 200", fault.name, got)
		}
		if err := served(edge, "pgd", "/before", "")(); err != nil {
			t.Fatalf("Postgres %s: the edge stopped serving: %v", fault.name, err)
		}
		figures = append(figures, fmt.Sprintf("%s: a read answered 503 in %v, a write in %v, the slowest of %d at once in %v", fault.name,
			read.Round(time.Millisecond), write.Round(time.Millisecond), len(burst), slices.Max(burst).Round(time.Millisecond)))

		fault.repair()
		back := eventually(t, 60*time.Second, "the api answers again after Postgres was "+fault.name, func() error {
			r, err := api.try("GET", "/v1/tenants/pgd", nil)
			if err != nil {
				return err
			}
			if r.Status != 200 {
				return fmt.Errorf("%s", r)
			}
			return nil
		})
		figures = append(figures, fmt.Sprintf("back %v after the repair", back.Round(10*time.Millisecond)))
		// The write answered 503 did not happen, and the relay carries the next one.
		routes := api.call("GET", "/v1/tenants/pgd/routes", nil)
		if routes.Status != 200 || strings.Contains(string(routes.Raw), "lost-"+fault.name) {
			t.Fatalf("after Postgres was %s: routes %s, want no lost-%s", fault.name, routes, fault.name)
		}
		path := "/after-" + fault.name
		api.createRoute("pgd", routeSpec("after-"+fault.name, path, up.URL, "none"))
		eventually(t, 60*time.Second, "the edge serves "+path, served(edge, "pgd", path, ""))
	}
	t.Logf("FIGURES api with Postgres down (TOLLGATE_DB_TIMEOUT %v): %s", bound, strings.Join(figures, "; "))
}
