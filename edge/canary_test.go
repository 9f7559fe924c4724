package edge_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"tollgate/tenants"
)

// canaryRoute is a route of acme on path to primary, with a canary to canary.
func canaryRoute(acme, id, path, primary, canary string, c tenants.Canary) *tenants.Route {
	c.Upstream.Targets = []tenants.Target{{URL: canary}}
	return &tenants.Route{ID: id, TenantID: acme, Name: id, Paths: []string{path},
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: primary}}}, Canary: &c}
}

// canaryClient sends requests to the harness's edge over pooled connections, with
// Host set by the URL ("http://acme.edge.test/…").
func (h *harness) canaryClient() *http.Client {
	pub := h.public
	tr := &http.Transport{
		MaxIdleConnsPerHost: 16,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", pub)
		},
	}
	h.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// countByUpstream sends n GETs of url over workers connections, the i-th with the headers
// header(i) returns (name, value pairs; nil for none), and counts the answers by the
// echo upstream that gave them. Any other answer fails the test.
func countByUpstream(t *testing.T, hc *http.Client, url string, n, workers int, header func(i int) []string) map[string]int {
	t.Helper()
	var mu sync.Mutex
	counts := map[string]int{}
	var wg sync.WaitGroup
	next := make(chan int)
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				req, _ := http.NewRequest("GET", url, nil)
				if header != nil {
					hs := header(i)
					for j := 0; j+1 < len(hs); j += 2 {
						req.Header.Set(hs[j], hs[j+1])
					}
				}
				resp, err := hc.Do(req)
				if err != nil {
					errs <- err
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				side := resp.Header.Get("X-Echo")
				if resp.StatusCode != 200 || side == "" {
					errs <- fmt.Errorf("request %d: status %d, upstream %q", i, resp.StatusCode, side)
					return
				}
				mu.Lock()
				counts[side]++
				mu.Unlock()
			}
		}()
	}
	func() {
		defer close(next)
		for i := range n {
			select {
			case next <- i:
			case err := <-errs:
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	return counts
}

// upstreamOf is the upstream that answered a request.
func upstreamOf(t *testing.T, r result) string {
	t.Helper()
	if r.status != 200 || r.echo == nil {
		t.Fatalf("want an upstream's answer, got %s", r)
	}
	return r.echo.Name
}

// TestCanaryWeightedSplit: without match or stickiness the split follows a fixed
// schedule, so 10,000 requests (sent concurrently) give the canary exactly weight × 100
// of them, and the counter by side agrees.
func TestCanaryWeightedSplit(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	primary, canary := newUpstream(t, "primary"), newUpstream(t, "canary")
	acme := h.tenant("acme")
	weights := []int{0, 1, 5, 33, 50, 99, 100}
	for _, w := range weights {
		h.put(canaryRoute(acme, fmt.Sprintf("w%d", w), fmt.Sprintf("/w%d", w), primary.URL, canary.URL, tenants.Canary{Weight: w}))
	}
	h.e.Loaded()
	hc := h.canaryClient()
	for _, w := range weights {
		id := fmt.Sprintf("w%d", w)
		// The cycle's length divides 100, so any multiple of 100 requests is exact: 10,000
		// for one weight, 1,000 for the others.
		n := 1_000
		if w == 5 {
			n = 10_000
		}
		got := countByUpstream(t, hc, "http://acme."+domain+"/"+id, n, 8, nil)
		if want := w * n / 100; got["canary"] != want || got["primary"] != n-want {
			t.Errorf("weight %d: %v over %d requests, want exactly %d to the canary", w, got, n, want)
		}
		for side, n := range got {
			if m := h.metric("tollgate_edge_canary_requests_total", map[string]string{"tenant": "acme", "route": id, "side": side}); int(m) != n {
				t.Errorf("weight %d: tollgate_edge_canary_requests_total{side=%q} = %v, want %d", w, side, m, n)
			}
		}
	}
	// A route without a canary has no series.
	h.route(acme, "plain", []string{"/plain"}, nil, tenants.AuthNone, primary.URL)
	waitFor(t, 5*time.Second, func() string {
		if r := h.get("acme."+domain, "/plain"); r.status != 200 {
			return r.String()
		}
		return ""
	})
	if m := h.metric("tollgate_edge_canary_requests_total", map[string]string{"route": "plain"}); m != 0 {
		t.Errorf("a route without a canary counted %v canary decisions", m)
	}
}

// TestCanaryHeaderMatch: a matching header sends a request to the canary whatever the
// weight; other requests follow the weight.
func TestCanaryHeaderMatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	primary, canary := newUpstream(t, "primary"), newUpstream(t, "canary")
	acme := h.tenant("acme")
	h.put(canaryRoute(acme, "values", "/values", primary.URL, canary.URL, tenants.Canary{
		Weight: 0, Match: &tenants.CanaryMatch{Header: "X-Canary", Values: []string{"on", "beta-1"}}}))
	h.put(canaryRoute(acme, "any", "/any", primary.URL, canary.URL, tenants.Canary{
		Weight: 0, Match: &tenants.CanaryMatch{Header: "x-canary"}}))
	h.put(canaryRoute(acme, "all", "/all", primary.URL, canary.URL, tenants.Canary{
		Weight: 100, Match: &tenants.CanaryMatch{Header: "X-Canary", Values: []string{"on"}}}))
	h.e.Loaded()
	host := "acme." + domain

	for _, tc := range []struct {
		path   string
		header []string
		want   string
	}{
		{"/values", []string{"X-Canary: on"}, "canary"},
		{"/values", []string{"x-canary: beta-1"}, "canary"}, // header names have no case
		{"/values", []string{"X-Canary:   on  "}, "canary"}, // surrounding blanks are not the value
		{"/values", []string{"X-Canary: ON"}, "primary"},    // values are exact
		{"/values", []string{"X-Canary: on,beta-1"}, "primary"},
		{"/values", []string{"X-Canary: off"}, "primary"},
		{"/values", []string{"X-Canary:"}, "primary"},
		{"/values", nil, "primary"},
		{"/values", []string{"X-Canary-2: on"}, "primary"},
		{"/any", []string{"X-Canary: anything"}, "canary"},
		{"/any", []string{"X-Canary:"}, "primary"}, // an empty value is no value
		{"/any", nil, "primary"},
		{"/all", []string{"X-Canary: off"}, "canary"},
		{"/all", nil, "canary"},
	} {
		if got := upstreamOf(t, h.get(host, tc.path, tc.header...)); got != tc.want {
			t.Errorf("GET %s %q: served by %s, want %s", tc.path, tc.header, got, tc.want)
		}
	}

	// Matched requests go to the canary on top of the schedule's share, and do not take
	// a turn of the schedule.
	h.put(canaryRoute(acme, "mixed", "/mixed", primary.URL, canary.URL, tenants.Canary{
		Weight: 10, Match: &tenants.CanaryMatch{Header: "X-Canary", Values: []string{"on"}}}))
	waitFor(t, 5*time.Second, func() string {
		if r := h.get(host, "/mixed"); r.status != 200 {
			return r.String()
		}
		return ""
	})
	got := countByUpstream(t, h.canaryClient(), "http://"+host+"/mixed", 2_000, 4, func(i int) []string {
		if i%2 == 0 {
			return []string{"X-Canary", "on"}
		}
		return nil
	})
	if got["canary"] != 1_000+100 {
		t.Errorf("1,000 matched and 1,000 unmatched requests at weight 10: %v, want 1,100 to the canary", got)
	}
}

// canarySecret is the tenant's shared secret in the claim tests.
const canarySecret = "canary-test-secret-canary-test-secret!"

// canaryToken signs claims (iss issA, aud audA, sub, valid for an hour, plus extra) with
// canarySecret.
func canaryToken(t testing.TB, sub string, extra map[string]any) string {
	c := claims(issA, sub)
	for k, v := range extra {
		c[k] = v
	}
	return sign(t, jwt.SigningMethodHS256, []byte(canarySecret), c, nil)
}

// rawCanaryToken signs a payload given as JSON text, as is.
func rawCanaryToken(payload string) string {
	in := b64.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + b64.EncodeToString([]byte(payload))
	m := hmac.New(sha256.New, []byte(canarySecret))
	m.Write([]byte(in))
	return in + "." + b64.EncodeToString(m.Sum(nil))
}

// TestCanaryClaimMatch: on JWT routes a claim of the verified token selects the canary:
// strings as is, numbers and booleans by their JSON text, any element of an array,
// dotted names through nested objects.
func TestCanaryClaimMatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	primary, canary := newUpstream(t, "primary"), newUpstream(t, "canary")
	acme := h.tenant("acme")
	h.put(&tenants.Issuer{ID: "hs", TenantID: acme, Issuer: issA, Audiences: []string{audA}, HS256Secret: canarySecret})
	route := func(id, auth, claim string, values ...string) {
		r := canaryRoute(acme, id, "/"+id, primary.URL, canary.URL, tenants.Canary{
			Match: &tenants.CanaryMatch{Claim: claim, Values: values}})
		r.Auth = auth
		h.put(r)
	}
	route("groups", tenants.AuthJWT, "groups", "beta", "7", "true")
	route("nested", tenants.AuthJWT, "org.plan", "gold")
	route("dotted", tenants.AuthJWT, "https://example.com/tier", "gold")
	route("present", tenants.AuthJWT, "beta_user")
	route("either", tenants.AuthKeyOrJWT, "groups", "beta")
	h.put(&tenants.Consumer{ID: "c-ann", TenantID: acme, Name: "ann"})
	key := h.key(acme, "c-ann", "k-ann")
	h.e.Loaded()
	host := "acme." + domain

	for _, tc := range []struct {
		name, path, tok string
		want            string
	}{
		{"string", "/groups", canaryToken(t, "u", map[string]any{"groups": "beta"}), "canary"},
		{"array element", "/groups", canaryToken(t, "u", map[string]any{"groups": []any{"alpha", "beta"}}), "canary"},
		{"array without", "/groups", canaryToken(t, "u", map[string]any{"groups": []any{"alpha", "gamma"}}), "primary"},
		{"number", "/groups", canaryToken(t, "u", map[string]any{"groups": 7}), "canary"},
		{"number in an array", "/groups", canaryToken(t, "u", map[string]any{"groups": []any{1, 7}}), "canary"},
		{"other number", "/groups", canaryToken(t, "u", map[string]any{"groups": 7.5}), "primary"},
		{"bool", "/groups", canaryToken(t, "u", map[string]any{"groups": true}), "canary"},
		{"string \"true\" is true's text too", "/groups", canaryToken(t, "u", map[string]any{"groups": "true"}), "canary"},
		{"escaped string", "/groups", rawCanaryToken(`{"iss":"` + issA + `","aud":"` + audA + `","sub":"u","exp":9999999999,"groups":"b\u0065ta"}`), "canary"},
		{"case", "/groups", canaryToken(t, "u", map[string]any{"groups": "Beta"}), "primary"},
		{"object", "/groups", canaryToken(t, "u", map[string]any{"groups": map[string]any{"beta": true}}), "primary"},
		{"nested array", "/groups", canaryToken(t, "u", map[string]any{"groups": []any{[]any{"beta"}}}), "primary"},
		{"null", "/groups", canaryToken(t, "u", map[string]any{"groups": nil}), "primary"},
		{"absent", "/groups", canaryToken(t, "u", nil), "primary"},
		{"nested", "/nested", canaryToken(t, "u", map[string]any{"org": map[string]any{"plan": "gold"}}), "canary"},
		{"nested other", "/nested", canaryToken(t, "u", map[string]any{"org": map[string]any{"plan": "tin"}}), "primary"},
		{"top-level dotted name wins", "/nested", canaryToken(t, "u", map[string]any{"org.plan": "gold", "org": map[string]any{"plan": "tin"}}), "canary"},
		{"path through an array", "/nested", canaryToken(t, "u", map[string]any{"org": []any{map[string]any{"plan": "gold"}}}), "primary"},
		{"namespaced claim", "/dotted", canaryToken(t, "u", map[string]any{"https://example.com/tier": "gold"}), "canary"},
		{"present", "/present", canaryToken(t, "u", map[string]any{"beta_user": false}), "canary"},
		{"present, empty array", "/present", canaryToken(t, "u", map[string]any{"beta_user": []any{}}), "canary"},
		{"present, null", "/present", canaryToken(t, "u", map[string]any{"beta_user": nil}), "primary"},
		{"not present", "/present", canaryToken(t, "u", nil), "primary"},
		{"key_or_jwt by token", "/either", canaryToken(t, "u", map[string]any{"groups": "beta"}), "canary"},
	} {
		tok := tc.tok
		// Twice: the second is a hit of the verified-token cache.
		for range 2 {
			if got := upstreamOf(t, h.get(host, tc.path, bearerH(tok))); got != tc.want {
				t.Errorf("%s: served by %s, want %s", tc.name, got, tc.want)
			}
		}
	}

	// A request authenticated by key has no verified token: its bearer header is
	// whatever the client sent.
	forged := rawCanaryToken(`{"groups":"beta"}`)[:20] + ".e30.x"
	if got := upstreamOf(t, h.get(host, "/either", "X-API-Key: "+key, bearerH(canaryToken(t, "u", map[string]any{"groups": "beta"})))); got != "primary" {
		t.Errorf("key caller with a matching token alongside: served by %s, want primary", got)
	}
	if got := upstreamOf(t, h.get(host, "/either", "X-API-Key: "+key, bearerH(forged))); got != "primary" {
		t.Errorf("key caller with a forged token alongside: served by %s, want primary", got)
	}
	// A refused token never reaches either side.
	if r := h.get(host, "/groups", bearerH(forged)); r.status != 401 || r.echo != nil {
		t.Errorf("forged token: %s", r)
	}
}

// TestCanarySticky: a sticky canary keeps a key on one side, splits distinct keys by the
// weight within 1%, and decides exactly as the documented hash does, so every edge agrees.
func TestCanarySticky(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	primary, canary := newUpstream(t, "primary"), newUpstream(t, "canary")
	acme := h.tenant("acme")
	h.put(canaryRoute(acme, "hdr", "/hdr", primary.URL, canary.URL, tenants.Canary{Weight: 30, Sticky: true, StickyOn: "header:X-User"}))
	h.put(canaryRoute(acme, "ip", "/ip", primary.URL, canary.URL, tenants.Canary{Weight: 50, Sticky: true, StickyOn: "ip"}))
	anon := canaryRoute(acme, "anon", "/anon", primary.URL, canary.URL, tenants.Canary{Weight: 50, Sticky: true})
	h.put(anon)
	keyed := canaryRoute(acme, "keyed", "/keyed", primary.URL, canary.URL, tenants.Canary{Weight: 50, Sticky: true, StickyOn: "consumer"})
	keyed.Auth = tenants.AuthKey
	h.put(keyed)
	keys := map[string]string{}
	for i := range 40 {
		id := fmt.Sprintf("c-%02d", i)
		h.put(&tenants.Consumer{ID: id, TenantID: acme, Name: id})
		keys[id] = h.key(acme, id, "k-"+id)
	}
	h.e.Loaded()
	host := "acme." + domain
	hc := h.canaryClient()
	user := func(i int) []string { return []string{"X-User", fmt.Sprintf("user-%d", i)} }

	// 10,000 distinct keys at weight 30: each exactly where the documented hash puts it,
	// and so within ±1% of the weight (checked for every weight below, on the hash alone).
	var mu sync.Mutex
	side := map[string]string{}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 10_000; i += 8 {
				req, _ := http.NewRequest("GET", "http://"+host+"/hdr", nil)
				k := user(i)[1]
				req.Header.Set("X-User", k)
				resp, err := hc.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("key %s: status %d", k, resp.StatusCode)
					return
				}
				mu.Lock()
				side[k] = resp.Header.Get("X-Echo")
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	onCanary, wrong := 0, 0
	for i := range 10_000 {
		k := user(i)[1]
		want := "primary"
		if stickyBucketSpec([]byte(k)) < 30*100 {
			want = "canary"
		}
		if side[k] == "canary" {
			onCanary++
		}
		if side[k] != want {
			wrong++
		}
	}
	if onCanary < 2_900 || onCanary > 3_100 {
		t.Errorf("%d of 10,000 distinct keys on the canary at weight 30, want 3,000 ± 100", onCanary)
	}
	if wrong > 0 {
		t.Errorf("%d of 10,000 keys on another side than the sticky hash puts them", wrong)
	}

	var perBucket [10_000]int
	for i := range 10_000 {
		perBucket[stickyBucketSpec([]byte(user(i)[1]))]++
	}
	n := 0
	for w := 1; w < 100; w++ {
		for b := (w - 1) * 100; b < w*100; b++ {
			n += perBucket[b]
		}
		if n < (w-1)*100 || n > (w+1)*100 {
			t.Errorf("weight %d: the sticky hash puts %d of 10,000 distinct keys on the canary", w, n)
		}
	}

	// The same key, again and again and concurrently: one side.
	for _, k := range []string{"user-1", "user-2", "user-3", "user-4", "ann", strings.Repeat("z", 4000)} {
		got := countByUpstream(t, hc, "http://"+host+"/hdr", 50, 4, func(int) []string { return []string{"X-User", k} })
		if len(got) != 1 {
			t.Errorf("key %.20q went to both sides: %v", k, got)
		}
	}
	// Without the header the schedule decides: exactly 30% of any 100 requests.
	if got := countByUpstream(t, hc, "http://"+host+"/hdr", 1_000, 4, nil); got["canary"] != 300 {
		t.Errorf("no header, weight 30: %v over 1,000 requests, want 300 to the canary", got)
	}
	// An empty value is no key either.
	if got := countByUpstream(t, hc, "http://"+host+"/hdr", 1_000, 4, func(int) []string { return []string{"X-User", ""} }); got["canary"] != 300 {
		t.Errorf("empty header, weight 30: %v over 1,000 requests, want 300 to the canary", got)
	}

	// By client address (here always 127.0.0.1), and by consumer when anonymous: one side.
	for _, p := range []string{"/ip", "/anon"} {
		if got := countByUpstream(t, hc, "http://"+host+p, 200, 4, nil); len(got) != 1 {
			t.Errorf("%s: one client went to both sides: %v", p, got)
		}
	}
	// By consumer: each consumer on one side, the one its id hashes to.
	for id, key := range keys {
		got := countByUpstream(t, hc, "http://"+host+"/keyed", 10, 2, func(int) []string { return []string{"X-API-Key", key} })
		want := "primary"
		if stickyBucketSpec([]byte(id)) < 50*100 {
			want = "canary"
		}
		if len(got) != 1 || got[want] != 10 {
			t.Errorf("consumer %s: %v, want all on %s", id, got, want)
		}
	}
}

// TestCanaryStickyAcrossEdges: two edges with the same config put every key on the same
// side.
func TestCanaryStickyAcrossEdges(t *testing.T) {
	t.Parallel()
	primary, canary := newUpstream(t, "primary"), newUpstream(t, "canary")
	var seen [2]map[string]bool
	for e := range seen {
		h := newHarness(t)
		acme := h.tenant("acme")
		h.put(canaryRoute(acme, "hdr", "/hdr", primary.URL, canary.URL, tenants.Canary{Weight: 20, Sticky: true, StickyOn: "header:X-User"}))
		h.e.Loaded()
		hc := h.canaryClient()
		seen[e] = map[string]bool{}
		for i := range 500 {
			req, _ := http.NewRequest("GET", "http://acme."+domain+"/hdr", nil)
			req.Header.Set("X-User", fmt.Sprint("u", i))
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			seen[e][fmt.Sprint("u", i)] = resp.Header.Get("X-Echo") == "canary"
		}
	}
	for k, c := range seen[0] {
		if seen[1][k] != c {
			t.Errorf("key %s: canary %v on one edge, %v on the other", k, c, seen[1][k])
		}
	}
}

// stickyBucketSpec is the sticky hash as the README documents it: FNV-1a 64 over
// "tollgate/canary\x00" and the key, the murmur3 finalizer, modulo 10,000. It is written
// out here so that a change to the edge's hash, which would move consumers between the
// sides across the fleet, fails the tests.
func stickyBucketSpec(key []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, b := range append([]byte("tollgate/canary\x00"), key...) {
		h ^= uint64(b)
		h *= 1099511628211
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h % 10_000
}

// FuzzCanaryMatch: no header value or claim value makes the edge fail a request of a
// canary route, and each goes to the side the rules say: a header value in Values or a
// claim with one to the canary, another header value where the sticky hash puts it.
func FuzzCanaryMatch(f *testing.F) {
	for _, s := range []string{"", "on", " on", "on ", "ON", "\x00", "\x10", "\xff\xfe", "a,b", "a b", strings.Repeat("x", 9000),
		`"on"`, `["on"]`, `["x",7]`, `7`, ` 7 `, `7.0`, `1e400`, `-0`, `true`, `null`, `{}`, `{"on":"on"}`, `[[["on"]]]`,
		`"\ud800"`, `"\u0000on"`, `"o\u006e"`} {
		f.Add(s)
	}
	h := newHarness(f)
	primary, canary := newUpstream(f, "primary"), newUpstream(f, "canary")
	acme := h.tenant("acme")
	h.put(&tenants.Issuer{ID: "hs", TenantID: acme, Issuer: issA, Audiences: []string{audA}, HS256Secret: canarySecret})
	values := []string{"on", "7", "true"}
	h.put(canaryRoute(acme, "hdr", "/hdr", primary.URL, canary.URL, tenants.Canary{Weight: 50, Sticky: true, StickyOn: "header:X-Canary",
		Match: &tenants.CanaryMatch{Header: "X-Canary", Values: values}}))
	cl := canaryRoute(acme, "claim", "/claim", primary.URL, canary.URL, tenants.Canary{Weight: 0, Match: &tenants.CanaryMatch{Claim: "grp", Values: values}})
	cl.Auth = tenants.AuthJWT
	h.put(cl)
	h.e.Loaded()
	host := "acme." + domain
	inValues := func(s string) bool { return s == "on" || s == "7" || s == "true" }
	f.Fuzz(func(t *testing.T, v string) {
		if len(v) < 8000 && !strings.ContainsAny(v, "\r\n") {
			r := send(t, h.public, "GET", host, "/hdr", []string{"X-Canary: " + v}, "")
			if r.status != 200 && r.status != 400 {
				t.Fatalf("header %q: %s", v, r)
			}
			if canaryPrintable(v) && strings.TrimSpace(v) == v && v != "" {
				want := "primary"
				if inValues(v) || stickyBucketSpec([]byte(v)) < 5_000 {
					want = "canary"
				}
				if r.status != 200 || r.echo.Name != want {
					t.Errorf("header %q: %s, want %s", v, r, want)
				}
			}
		}
		if json.Valid([]byte(v)) && len(v) < 4000 {
			tok := rawCanaryToken(`{"iss":"` + issA + `","aud":"` + audA + `","sub":"u","exp":9999999999,"grp":` + v + `}`)
			r := send(t, h.public, "GET", host, "/claim", []string{bearerH(tok)}, "")
			switch {
			case r.status == 401: // a payload golang-jwt refuses (a number it cannot hold)
			case r.status != 200 || r.echo == nil:
				t.Fatalf("claim %s: %s", v, r)
			default:
				d := json.NewDecoder(strings.NewReader(v))
				d.UseNumber()
				var claim any
				_ = d.Decode(&claim)
				scalar := func(c any) bool {
					switch c := c.(type) {
					case string:
						return inValues(c)
					case json.Number:
						return inValues(c.String())
					case bool:
						return c
					}
					return false
				}
				want := "primary"
				if arr, ok := claim.([]any); ok {
					for _, e := range arr {
						if scalar(e) {
							want = "canary"
						}
					}
				} else if scalar(claim) {
					want = "canary"
				}
				if r.echo.Name != want {
					t.Errorf("claim %s: served by %s, want %s", v, r.echo.Name, want)
				}
			}
		}
		// The edge still answers.
		if r := send(t, h.public, "GET", host, "/hdr", nil, ""); r.status != 200 {
			t.Fatalf("after %q: %s", v, r)
		}
	})
}

func canaryPrintable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// TestCanaryWithCache: on a route with a cache and a canary, each side has its own
// entries: a cached answer of one side is never served to a request bound for the other.
func TestCanaryWithCache(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	primary, canary := newUpstream(t, "primary"), newUpstream(t, "canary")
	acme := h.tenant("acme")
	r := canaryRoute(acme, "c", "/c", primary.URL, canary.URL, tenants.Canary{
		Weight: 0, Match: &tenants.CanaryMatch{Header: "X-Canary", Values: []string{"on"}}})
	r.Cache = &tenants.Cache{TTLMS: 60_000, MaxEntries: 16, MaxBodyBytes: 1 << 20}
	h.put(r)
	h.e.Loaded()
	host := "acme." + domain

	for i, c := range []struct {
		hdr        []string
		side, xcac string
	}{
		{nil, "primary", "MISS"},
		{[]string{"X-Canary: on"}, "canary", "MISS"},
		{nil, "primary", "HIT"},
		{[]string{"X-Canary: on"}, "canary", "HIT"},
	} {
		res := h.get(host, "/c/x", c.hdr...)
		if got := upstreamOf(t, res); got != c.side || res.header.Get("X-Cache") != c.xcac {
			t.Errorf("%d %q: served by %s (X-Cache %s), want %s (%s)", i, c.hdr, got, res.header.Get("X-Cache"), c.side, c.xcac)
		}
	}
	if primary.hits.Load() != 1 || canary.hits.Load() != 1 {
		t.Errorf("upstream hits: primary %d, canary %d; want 1 each", primary.hits.Load(), canary.hits.Load())
	}
}
