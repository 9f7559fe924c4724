package edge_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"tollgate/edge"
	"tollgate/tenants"
)

const domain = "edge.test"

// loopbackPolicy admits the 127.0.0.0/8 upstreams the tests start.
func loopbackPolicy() *tenants.UpstreamAddressRule {
	return &tenants.UpstreamAddressRule{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
}

// harness is one edge on loopback listeners, fed entries like a KV watcher would.
type harness struct {
	t      testing.TB
	e      *edge.Edge
	reg    *prometheus.Registry
	public string // host:port
	admin  string
	rev    atomic.Int64
	kvRev  atomic.Uint64
}

func newHarness(t testing.TB, opts ...func(*edge.Config)) *harness {
	t.Helper()
	reg := prometheus.NewRegistry()
	level := slog.LevelWarn
	if os.Getenv("EDGE_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	cfg := edge.Config{
		Domain:       domain,
		AddressRule:  loopbackPolicy(),
		Logger:       slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: level})),
		Registry:     reg,
		EdgeID:       "test",
		CompileDelay: time.Millisecond,
	}
	for _, o := range opts {
		o(&cfg)
	}
	e, err := edge.New(cfg)
	if err != nil {
		t.Fatalf("edge.New: %v", err)
	}
	pub, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	adm, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, e: e, reg: reg, public: pub.Addr().String(), admin: adm.Addr().String()}
	done := make(chan error, 1)
	go func() { done <- e.Serve(pub, adm) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return h
}

// testWriter sends the edge's log lines to the test log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// put applies one object as its KV entry with the next rev.
func (h *harness) put(obj any) int64 {
	h.t.Helper()
	rev := h.rev.Add(1)
	h.putRev(obj, rev)
	return rev
}

func (h *harness) putRev(obj any, rev int64) {
	h.t.Helper()
	e := tenants.Entry{Rev: rev}
	switch o := obj.(type) {
	case *tenants.Tenant:
		e.Tenant = o
	case *tenants.Route:
		e.Route = o
	case *tenants.Consumer:
		e.Consumer = o
	case *tenants.KeyEntry:
		e.Key = o
	case *tenants.ConsumerPlan:
		e.Plan = o
	case *tenants.Issuer:
		e.JWTIssuer = o
	case *tenants.AccessRules:
		e.AccessRules = o
	default:
		h.t.Fatalf("put: %T is not a config object", obj)
	}
	key, err := e.EntryKey()
	if err != nil {
		h.t.Fatal(err)
	}
	b, err := json.Marshal(&e)
	if err != nil {
		h.t.Fatal(err)
	}
	h.e.Apply(key, b, h.kvRev.Add(1))
}

func (h *harness) del(key string) { h.e.Apply(key, nil, h.kvRev.Add(1)) }

// tenant creates a tenant with the slug (id "t-"+slug).
func (h *harness) tenant(slug string) string {
	id := "t-" + slug
	h.put(&tenants.Tenant{ID: id, Slug: slug, Name: slug})
	return id
}

// route files a route on tenantID pointing at the upstreams (weight 1 each).
func (h *harness) route(tenantID, id string, paths []string, methods []string, auth string, upstreams ...string) *tenants.Route {
	r := &tenants.Route{ID: id, TenantID: tenantID, Name: id, Paths: paths, Methods: methods, Auth: auth}
	for _, u := range upstreams {
		r.Upstream.Targets = append(r.Upstream.Targets, tenants.Target{URL: u, Weight: 1})
	}
	h.put(r)
	return r
}

// key gives a consumer a key and returns the plaintext.
func (h *harness) key(tenantID, consumerID, keyID string) string {
	plain, hash, _ := tenants.NewSecret(tenants.KeyPrefix)
	h.put(&tenants.KeyEntry{ID: keyID, TenantID: tenantID, ConsumerID: consumerID, Hash: hash})
	return plain
}

// waitFor polls fn until it returns "" (success) or the time is up.
func waitFor(t testing.TB, d time.Duration, fn func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		msg := fn()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v: %s", d, msg)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// result is what a raw request got back.
type result struct {
	status int
	header http.Header
	body   string
	echo   *echo // the upstream's view of the request, when it reached the echo upstream
}

func (r result) errCode() string {
	var b struct {
		Error struct{ Code, Message, RequestID string }
	}
	if json.Unmarshal([]byte(r.body), &b) != nil {
		return ""
	}
	return b.Error.Code
}

func (r result) String() string {
	return fmt.Sprintf("%d %s", r.status, r.body)
}

// send writes a raw HTTP/1.1 request (target exactly as given) to addr and reads the
// answer. headers are "Name: value" lines; Host is added unless given.
func send(t testing.TB, addr, method, host, target string, headers []string, body string) result {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\n", method, target)
	hasHost, hasLen := false, false
	for _, h := range headers {
		l := strings.ToLower(h)
		hasHost = hasHost || strings.HasPrefix(l, "host:")
		hasLen = hasLen || strings.HasPrefix(l, "content-length:") || strings.HasPrefix(l, "transfer-encoding:")
		b.WriteString(h + "\r\n")
	}
	if !hasHost && host != "" {
		b.WriteString("Host: " + host + "\r\n")
	}
	if body != "" && !hasLen {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("Connection: close\r\n\r\n")
	b.WriteString(body)
	if _, err := io.WriteString(c, b.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%s %s: reading response: %v", method, target, err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	r := result{status: resp.StatusCode, header: resp.Header, body: string(rb)}
	if resp.Header.Get("X-Echo") != "" {
		r.echo = &echo{}
		if err := json.Unmarshal(rb, r.echo); err != nil {
			t.Fatalf("echo body: %v: %s", err, rb)
		}
	}
	return r
}

func (h *harness) get(host, target string, headers ...string) result {
	h.t.Helper()
	return send(h.t, h.public, "GET", host, target, headers, "")
}

// echo is what the echo upstream saw.
type echo struct {
	Name       string              `json:"name"`
	Method     string              `json:"method"`
	RequestURI string              `json:"request_uri"`
	Host       string              `json:"host"`
	Header     map[string][]string `json:"header"`
	Body       string              `json:"body"`
}

func (e *echo) get(k string) string {
	if v := e.Header[http.CanonicalHeaderKey(k)]; len(v) > 0 {
		return strings.Join(v, ",")
	}
	return ""
}

func (e *echo) has(k string) bool {
	_, ok := e.Header[http.CanonicalHeaderKey(k)]
	return ok
}

// upstream is an echo server on loopback.
type upstream struct {
	*httptest.Server
	name  string
	hits  atomic.Int64
	mu    sync.Mutex
	delay time.Duration
	hook  func(w http.ResponseWriter)
}

func newUpstream(t testing.TB, name string) *upstream {
	u := &upstream{name: name}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		u.mu.Lock()
		delay, hook := u.delay, u.hook
		u.mu.Unlock()
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
		}
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Echo", u.name)
		w.Header().Set("Content-Type", "application/json")
		if hook != nil {
			hook(w)
		}
		_ = json.NewEncoder(w).Encode(echo{
			Name: u.name, Method: r.Method, RequestURI: r.RequestURI, Host: r.Host,
			Header: r.Header, Body: string(body),
		})
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) setDelay(d time.Duration) {
	u.mu.Lock()
	u.delay = d
	u.mu.Unlock()
}

// metric sums the samples of a metric family whose labels include want.
func (h *harness) metric(name string, want map[string]string) float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !labelsMatch(m, want) {
				continue
			}
			switch {
			case m.Counter != nil:
				total += m.Counter.GetValue()
			case m.Gauge != nil:
				total += m.Gauge.GetValue()
			case m.Histogram != nil:
				total += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return total
}

func labelsMatch(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}
