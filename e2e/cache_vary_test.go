package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"tollgate/infra/testenv"
)

// TestCacheVaryAndCredentials: through a real edge process, an upstream that answers
// "public" and "Vary: Cookie" gets one kept page per cookie, so two callers with
// different cookies each get their own (a security probe once saw one caller's page
// given to the other); "Vary: *" keeps nothing; and a public answer to a request with a
// cookie goes to another caller only on a route that is shared.
func TestCacheVaryAndCredentials(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	_, api := s.startAPI()
	_, edge := s.startEdge()
	defer edge.close()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=600")
		switch {
		case strings.HasSuffix(r.URL.Path, "/star"):
			w.Header().Set("Vary", "*")
		case strings.HasPrefix(r.URL.Path, "/v/"):
			w.Header().Set("Vary", "Cookie")
		}
		fmt.Fprintf(w, "page for %q", r.Header.Get("Cookie"))
	}))
	t.Cleanup(up.Close)

	slug := testenv.Name("vary")
	api.createTenant(slug)
	cache := map[string]any{"ttl_ms": 600_000}
	api.createRoute(slug, routeSpec("v", "/v", up.URL, "none", "cache", cache))
	api.createRoute(slug, routeSpec("p", "/p", up.URL, "none", "cache", map[string]any{"ttl_ms": 600_000, "shared": true}))
	for _, path := range []string{"/v/warm", "/p/warm"} {
		eventually(t, applyDeadline, "the cached routes at the edge", func() error {
			r, err := edge.do("GET", slug, path)
			if err != nil {
				return err
			}
			if r.Status != 200 {
				return fmt.Errorf("%s", r)
			}
			return nil
		})
	}
	check := func(path, cookie, want string, own bool) {
		t.Helper()
		var hdr []string
		if cookie != "" {
			hdr = []string{"Cookie", cookie}
		}
		r := edge.get(t, slug, path, hdr...)
		if r.Status != 200 || r.Header.Get("X-Cache") != want {
			t.Errorf("%s with %q: %s X-Cache %q, want %s", path, cookie, r, r.Header.Get("X-Cache"), want)
		}
		if page := fmt.Sprintf("page for %q", cookie); own && string(r.Body) != page {
			t.Errorf("%s with %q: got %q", path, cookie, r.Body)
		}
	}
	alice, bob := "session=alice", "session=bob"
	check("/v/page", alice, "MISS", true)
	check("/v/page", bob, "MISS", true)
	check("/v/page", alice, "HIT", true)
	check("/v/page", bob, "HIT", true)
	check("/v/page", "", "MISS", true)

	check("/v/star", alice, "MISS", true)
	check("/v/star", alice, "MISS", true)

	// No Vary: on a route that is not shared the cookie's page stays its caller's; on a
	// shared one the public answer serves everyone.
	api.createRoute(slug, routeSpec("own", "/own", up.URL, "none", "cache", cache))
	eventually(t, applyDeadline, "the own route at the edge", func() error {
		r, err := edge.do("GET", slug, "/own/warm")
		if err != nil {
			return err
		}
		if r.Status != 200 {
			return fmt.Errorf("%s", r)
		}
		return nil
	})
	check("/own/page", alice, "MISS", true)
	check("/own/page", bob, "MISS", true)
	check("/p/page", alice, "MISS", true)
	check("/p/page", bob, "HIT", false)
}
