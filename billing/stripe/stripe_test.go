package stripe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tollgate/billing"
	"tollgate/billing/billingtest"
	billingstripe "tollgate/billing/stripe"
	"tollgate/infra/testenv"
	"tollgate/infra/usage"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopStripeMock()
	os.Exit(code)
}

// stripeProxy sits in front of stripe-mock: it records every request and can fail one,
// either before Stripe sees it (fail) or after (lose: Stripe has it, the answer is lost).
type stripeProxy struct {
	*httptest.Server
	mu       sync.Mutex
	calls    []call
	fail     atomic.Int32
	lose     atomic.Int32
	badInput atomic.Int32
	seq      atomic.Int64
	// loseIdentifier: the meter event with this identifier reaches Stripe and its answer
	// is lost, once.
	loseIdentifier string
}

type call struct {
	method     string
	path       string
	form       url.Values
	idempotent string
	account    string // Stripe-Account: the connected account the call acts on
}

func newProxy(t *testing.T) *stripeProxy {
	target, _ := url.Parse(testenv.StripeMock(t))
	rp := httputil.NewSingleHostReverseProxy(target)
	p := &stripeProxy{}
	rp.ModifyResponse = p.uniqueID
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		form, _ := url.ParseQuery(string(body))
		p.mu.Lock()
		p.calls = append(p.calls, call{method: r.Method, path: r.URL.Path, form: form,
			idempotent: r.Header.Get("Idempotency-Key"), account: r.Header.Get("Stripe-Account")})
		p.mu.Unlock()
		stripeErr := func(status int, typ string) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"error":{"type":%q,"message":"injected by the test"}}`, typ)
		}
		if p.fail.Add(-1) >= 0 {
			stripeErr(500, "api_error")
			return
		}
		if p.badInput.Add(-1) >= 0 {
			stripeErr(400, "invalid_request_error")
			return
		}
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		r.ContentLength = int64(len(body))
		p.mu.Lock()
		loseThis := p.loseIdentifier != "" && form.Get("identifier") == p.loseIdentifier
		if loseThis {
			p.loseIdentifier = ""
		}
		p.mu.Unlock()
		if p.lose.Add(-1) >= 0 || loseThis {
			rec := httptest.NewRecorder()
			rp.ServeHTTP(rec, r)
			stripeErr(502, "api_error")
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// uniqueID makes the id of each object a POST creates unique (stripe-mock answers every
// create with the same fixture), as Stripe's are; other answers pass unchanged.
func (p *stripeProxy) uniqueID(res *http.Response) error {
	if res.Request.Method != http.MethodPost || res.StatusCode != http.StatusOK || strings.Count(res.Request.URL.Path, "/") != 2 &&
		!strings.HasPrefix(res.Request.URL.Path, "/v1/checkout/sessions") && !strings.HasPrefix(res.Request.URL.Path, "/v1/billing/meters") {
		return nil
	}
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	var obj map[string]any
	if json.Unmarshal(body, &obj) == nil {
		if id, ok := obj["id"].(string); ok && id != "" {
			obj["id"] = fmt.Sprintf("%s%d", id, p.seq.Add(1))
			body, _ = json.Marshal(obj)
		}
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	res.ContentLength = int64(len(body))
	res.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return nil
}

// find returns the calls of a method and path.
func (p *stripeProxy) find(method, path string) []call {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []call
	for _, c := range p.calls {
		if c.method == method && c.path == path {
			out = append(out, c)
		}
	}
	return out
}

func (p *stripeProxy) meterEvents() []call {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []call
	for _, c := range p.calls {
		if c.path == "/v1/billing/meter_events" {
			out = append(out, c)
		}
	}
	return out
}

func (p *stripeProxy) count(path string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.calls {
		if c.path == path {
			n++
		}
	}
	return n
}

// clock is the real time plus an offset the test moves.
type clock struct{ off atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *clock) advance(d time.Duration) { c.off.Add(int64(d)) }

var quiet = slog.New(slog.DiscardHandler)

func newPusher(t *testing.T, db *billingtest.DB, p *stripeProxy, clk *clock) *billingstripe.Pusher {
	t.Helper()
	ps, err := billingstripe.New(billingstripe.Config{Key: "sk_test_123", URL: p.URL, Store: db.Store, Now: clk.now, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func TestEnableTenantCreatesOneCustomer(t *testing.T) {
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	proxy := newProxy(t)
	ps := newPusher(t, db, proxy, &clock{})
	ctx := context.Background()
	proxy.fail.Store(1) // the first attempt fails; nothing is recorded
	if _, err := ps.EnableTenant(ctx, tn.ID, tn.Slug, tn.Name); err == nil {
		t.Fatal("a failed create succeeded")
	}
	id1, err := ps.EnableTenant(ctx, tn.ID, tn.Slug, tn.Name)
	if err != nil || !strings.HasPrefix(id1, "cus_") {
		t.Fatalf("customer %q: %v", id1, err)
	}
	id2, err := ps.EnableTenant(ctx, tn.ID, tn.Slug, tn.Name)
	if err != nil || id2 != id1 {
		t.Fatalf("second enable: %q %v", id2, err)
	}
	if n := proxy.count("/v1/customers"); n != 2 {
		t.Fatalf("%d customer creates, want 2 (one failed, one made)", n)
	}
	for _, c := range proxy.calls {
		if c.idempotent != "tollgate-customer-"+tn.ID || c.form.Get("metadata[tollgate_tenant_id]") != tn.ID {
			t.Fatalf("create without the tenant's idempotency key or metadata: %+v", c)
		}
	}
}

// Usage goes to Stripe once per settled hour under a deterministic identifier; failures
// are retried with the same identifier after a backoff, pushed hours are never pushed
// again, and usage folded late goes out as a new revision of its difference.
func TestPushUsageExactlyOnce(t *testing.T) {
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	free := db.Tenant(t, "freeloader", "free") // not enabled: never pushed
	proxy := newProxy(t)
	clk := &clock{}
	ps := newPusher(t, db, proxy, clk)
	ctx := context.Background()
	cus, err := ps.EnableTenant(ctx, tn.ID, tn.Slug, tn.Name)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	h1, h2 := billing.Hour(now.Add(-3*time.Hour)), billing.Hour(now.Add(-2*time.Hour))
	db.Fold(t, billingtest.Batch(1,
		billingtest.Record(tn.ID, h1, "r", "", 200, true, 3),
		billingtest.Record(tn.ID, h1, "r", "", 429, false, 9), // not billable
		billingtest.Record(tn.ID, h2, "r", "c", 200, true, 5),
		billingtest.Record(tn.ID, now, "r", "", 200, true, 100), // this hour: not settled
		billingtest.Record(free.ID, h1, "r", "", 200, true, 50),
	))

	proxy.fail.Store(1) // h1's first attempt (oldest first) fails
	n, err := ps.PushDue(ctx)
	if err != nil || n != 1 {
		pushes, _ := db.Store.Pushes(ctx, tn.ID)
		t.Fatalf("first run pushed %d: %v; pushes %+v; calls %+v", n, err, pushes, proxy.meterEvents())
	}
	pushes, _ := db.Store.Pushes(ctx, tn.ID)
	if len(pushes) != 2 || pushes[0].Status != billing.PushPending || pushes[0].Attempts != 1 || pushes[0].LastError == "" ||
		pushes[1].Status != billing.PushPushed || pushes[1].Quantity != 5 {
		t.Fatalf("after the first run: %+v", pushes)
	}
	// Not due yet: nothing is sent.
	if n, _ := ps.PushDue(ctx); n != 0 || len(proxy.meterEvents()) != 2 {
		t.Fatalf("pushed %d before the backoff ended (%d calls)", n, len(proxy.meterEvents()))
	}
	clk.advance(time.Minute)
	if n, err := ps.PushDue(ctx); n != 1 || err != nil {
		t.Fatalf("retry pushed %d: %v", n, err)
	}
	// Done: more runs send nothing.
	for i := 0; i < 2; i++ {
		clk.advance(time.Minute)
		if n, _ := ps.PushDue(ctx); n != 0 {
			t.Fatalf("a pushed hour was pushed again")
		}
	}
	// A late batch for h2, and Stripe's answer to its push is lost: the retry carries the
	// same identifier (Stripe counts it once) and only the difference.
	db.Fold(t, billingtest.Batch(2, billingtest.Record(tn.ID, h2, "r", "c", 200, true, 4)))
	proxy.lose.Store(1)
	ps.PushDue(ctx)
	clk.advance(2 * time.Minute)
	ps.PushDue(ctx)

	events := proxy.meterEvents()
	var ids []string
	for _, e := range events {
		ids = append(ids, e.form.Get("identifier"))
		if e.form.Get("payload[stripe_customer_id]") != cus || e.form.Get("event_name") != "tollgate_requests" || e.idempotent != e.form.Get("identifier") {
			t.Fatalf("event %+v", e)
		}
	}
	id := func(h time.Time, rev int) string { return billing.PushIdentifier(tn.ID, h, rev) }
	want := []string{id(h1, 1), id(h2, 1), id(h1, 1), id(h2, 2), id(h2, 2)}
	if strings.Join(ids, " ") != strings.Join(want, " ") {
		t.Fatalf("identifiers sent:\n%v\nwant\n%v", ids, want)
	}
	if v := events[0].form.Get("payload[value]"); v != "3" {
		t.Fatalf("h1 value %s", v)
	}
	if v := events[3].form.Get("payload[value]"); v != "4" {
		t.Fatalf("h2 revision 2 value %s", v)
	}
	if ts := events[0].form.Get("timestamp"); ts != fmt.Sprint(h1.Unix()) {
		t.Fatalf("timestamp %s, want %d", ts, h1.Unix())
	}
	pushes, _ = db.Store.Pushes(ctx, tn.ID)
	var pushed int64
	for _, p := range pushes {
		if p.Status != billing.PushPushed {
			t.Fatalf("push %+v", p)
		}
		pushed += p.Quantity
	}
	if pushed != 3+5+4 {
		t.Fatalf("pushed %d billable requests, want 12", pushed)
	}
	if other, _ := db.Store.Pushes(ctx, free.ID); len(other) != 0 {
		t.Fatalf("a tenant without billing was pushed: %+v", other)
	}
}

func TestPermanentFailureIsNotRetried(t *testing.T) {
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	proxy := newProxy(t)
	clk := &clock{}
	ps := newPusher(t, db, proxy, clk)
	ctx := context.Background()
	if _, err := ps.EnableTenant(ctx, tn.ID, tn.Slug, tn.Name); err != nil {
		t.Fatal(err)
	}
	db.Fold(t, billingtest.Batch(1, billingtest.Record(tn.ID, time.Now().Add(-2*time.Hour), "r", "", 200, true, 1)))
	proxy.badInput.Store(1)
	ps.PushDue(ctx)
	clk.advance(24 * time.Hour)
	ps.PushDue(ctx)
	pushes, _ := db.Store.Pushes(ctx, tn.ID)
	if len(pushes) != 1 || pushes[0].Status != billing.PushFailed || len(proxy.meterEvents()) != 1 {
		t.Fatalf("pushes %+v after %d calls", pushes, len(proxy.meterEvents()))
	}
}

// events returns the meter events of one event name.
func (p *stripeProxy) events(name string) []call {
	var out []call
	for _, c := range p.meterEvents() {
		if c.form.Get("event_name") == name {
			out = append(out, c)
		}
	}
	return out
}

// fnRecord is a record of n requests, billable (200 from the upstream) or not (429 from
// the edge), that ran us µs of function time.
func fnRecord(tenantID string, at time.Time, billable bool, n, us int64) usage.Record {
	status := 429
	if billable {
		status = 200
	}
	r := billingtest.Record(tenantID, at, "r", "", status, billable, n)
	r.FunctionUS = us
	return r
}

// Function time goes to its own meter in µs, with the request push's guarantees: one
// identifier per (tenant, hour, revision) of its own, the same identifier on a retry, a
// late fold as a new revision of the difference, nothing for an hour without function
// time — and the sum Stripe accepted is the folded sum to the microsecond.
func TestPushFunctionTimeExactlyOnce(t *testing.T) {
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	proxy := newProxy(t)
	clk := &clock{}
	ps := newPusher(t, db, proxy, clk)
	ctx := context.Background()
	cus, err := ps.EnableTenant(ctx, tn.ID, tn.Slug, tn.Name)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	h1, h2 := billing.Hour(now.Add(-3*time.Hour)), billing.Hour(now.Add(-2*time.Hour))
	db.Fold(t, billingtest.Batch(1,
		fnRecord(tn.ID, h1, true, 3, 1_234_567),
		fnRecord(tn.ID, h1, false, 2, 1),  // not billable, but its function ran: billed
		fnRecord(tn.ID, h2, true, 5, 0),   // no function time: no function push
		fnRecord(tn.ID, now, true, 1, 99), // this hour: not settled
	))

	fnID := func(h time.Time, rev int) string { return billing.FunctionPushIdentifier(tn.ID, h, rev) }
	proxy.mu.Lock()
	proxy.loseIdentifier = fnID(h1, 1) // Stripe has it, the answer is lost
	proxy.mu.Unlock()
	if n, err := ps.PushDue(ctx); err != nil || n != 2 {
		t.Fatalf("first run pushed %d: %v; calls %+v", n, err, proxy.meterEvents())
	}
	clk.advance(time.Minute)
	if n, err := ps.PushDue(ctx); err != nil || n != 1 {
		t.Fatalf("retry pushed %d: %v", n, err)
	}
	db.Fold(t, billingtest.Batch(2, fnRecord(tn.ID, h1, false, 1, 33))) // late, not billable
	if n, err := ps.PushDue(ctx); err != nil || n != 1 {
		t.Fatalf("late fold pushed %d: %v", n, err)
	}
	for i := 0; i < 2; i++ {
		clk.advance(time.Minute)
		if n, _ := ps.PushDue(ctx); n != 0 {
			t.Fatalf("a pushed hour was pushed again")
		}
	}

	var ids, values []string
	for _, e := range proxy.events(billingstripe.DefaultFunctionEventName) {
		ids = append(ids, e.form.Get("identifier"))
		values = append(values, e.form.Get("payload[value]"))
		if e.form.Get("payload[stripe_customer_id]") != cus || e.idempotent != e.form.Get("identifier") ||
			e.form.Get("timestamp") != fmt.Sprint(h1.Unix()) {
			t.Fatalf("function event %+v", e)
		}
	}
	if want := []string{fnID(h1, 1), fnID(h1, 1), fnID(h1, 2)}; strings.Join(ids, " ") != strings.Join(want, " ") {
		t.Fatalf("function identifiers sent:\n%v\nwant\n%v", ids, want)
	}
	if want := "1234568 1234568 33"; strings.Join(values, " ") != want {
		t.Fatalf("function values %v, want %s", values, want)
	}
	var reqIDs []string
	for _, e := range proxy.events(billingstripe.DefaultEventName) {
		reqIDs = append(reqIDs, e.form.Get("identifier")+"="+e.form.Get("payload[value]"))
	}
	if want := billing.PushIdentifier(tn.ID, h1, 1) + "=3 " + billing.PushIdentifier(tn.ID, h2, 1) + "=5"; strings.Join(reqIDs, " ") != want {
		t.Fatalf("request events %v, want %s", reqIDs, want)
	}
	// The meter is made once, before the first function event, and found afterwards.
	meters := proxy.find(http.MethodPost, "/v1/billing/meters")
	if len(meters) != 1 || meters[0].form.Get("event_name") != billingstripe.DefaultFunctionEventName ||
		meters[0].idempotent != "tollgate-meter-"+billingstripe.DefaultFunctionEventName {
		t.Fatalf("meters made: %+v", meters)
	}

	pushes, _ := db.Store.Pushes(ctx, tn.ID)
	sum := map[string]int64{}
	for _, p := range pushes {
		if p.Status != billing.PushPushed || p.Identifier != billing.MeterPushIdentifier(p.Meter, tn.ID, p.Hour, p.Revision) {
			t.Fatalf("push %+v", p)
		}
		sum[p.Meter] += p.Quantity
	}
	if sum[billing.MeterFunctionUS] != 1_234_567+1+33 || sum[billing.MeterRequests] != 3+5 {
		t.Fatalf("pushed %v", sum)
	}

	// Reconciliation sees both meters agree with the rollups.
	r, err := billing.Reconcile(ctx, billing.PeriodOf(h1), billing.ReconcileSources{Edges: noEdges{}, Folded: db.Store, Stripe: db.Store,
		Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range append(r.Discrepancies, r.Pending...) {
		if strings.HasPrefix(d.Kind, "stripe") || strings.Contains(d.Message, "Stripe") {
			t.Fatalf("Stripe disagrees: %+v", d)
		}
	}
	if len(r.Tenants) != 1 || r.Tenants[0].FunctionPushed != 1_234_601 || r.Tenants[0].FunctionPushPending != 0 {
		t.Fatalf("tenants %+v", r.Tenants)
	}
}

// An hour of function time alone (its requests not billable) is one function push and no
// request push; while the function meter cannot be found, nothing is sent and the push
// waits its backoff like any failed attempt.
func TestFunctionPushWaitsForItsMeter(t *testing.T) {
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	proxy := newProxy(t)
	clk := &clock{}
	ps := newPusher(t, db, proxy, clk)
	ctx := context.Background()
	if _, err := ps.EnableTenant(ctx, tn.ID, tn.Slug, tn.Name); err != nil {
		t.Fatal(err)
	}
	h := billing.Hour(time.Now().Add(-2 * time.Hour))
	db.Fold(t, billingtest.Batch(1, fnRecord(tn.ID, h, false, 4, 777)))
	proxy.fail.Store(1) // the meters' list
	if n, err := ps.PushDue(ctx); err != nil || n != 0 {
		t.Fatalf("pushed %d: %v", n, err)
	}
	pushes, _ := db.Store.Pushes(ctx, tn.ID)
	if len(pushes) != 1 || pushes[0].Meter != billing.MeterFunctionUS || pushes[0].Status != billing.PushPending ||
		pushes[0].Attempts != 1 || !strings.Contains(pushes[0].LastError, "meters") || len(proxy.meterEvents()) != 0 {
		t.Fatalf("after the meter's lookup failed: %+v; events %+v", pushes, proxy.meterEvents())
	}
	r, err := billing.Reconcile(ctx, billing.PeriodOf(h), billing.ReconcileSources{Edges: noEdges{}, Folded: db.Store, Stripe: db.Store, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	var stripePending []string
	for _, d := range r.Pending {
		if d.Unit == billing.UnitFunctionUS {
			stripePending = append(stripePending, fmt.Sprintf("%s %d %d", d.Kind, d.Difference, d.FoldedFunctionUS))
		}
	}
	if strings.Join(stripePending, ";") != "pending -777 777" || r.Tenants[0].FunctionPushPending != 777 {
		t.Fatalf("reconcile while the push is retried: %v; tenants %+v", stripePending, r.Tenants)
	}
	clk.advance(time.Minute)
	if n, err := ps.PushDue(ctx); err != nil || n != 1 {
		t.Fatalf("retry pushed %d: %v", n, err)
	}
	ev := proxy.meterEvents()
	if len(ev) != 1 || ev[0].form.Get("event_name") != billingstripe.DefaultFunctionEventName || ev[0].form.Get("payload[value]") != "777" ||
		ev[0].form.Get("identifier") != billing.FunctionPushIdentifier(tn.ID, h, 1) {
		t.Fatalf("events %+v", ev)
	}
}

// noEdges is an edge view without totals: the Stripe comparison does not need them.
type noEdges struct{}

func (noEdges) EdgeTotals(context.Context, billing.Period) ([]usage.EdgeTotal, error) {
	return nil, nil
}

func TestFunctionEventNameMustDiffer(t *testing.T) {
	db := billingtest.Open(t)
	_, err := billingstripe.New(billingstripe.Config{Key: "sk_test_123", Store: db.Store, EventName: "x", FunctionEventName: "x"})
	if err == nil {
		t.Fatal("one event name for both meters was taken")
	}
}
