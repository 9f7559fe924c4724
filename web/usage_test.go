package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/billing"
	billingpg "tollgate/billing/postgres"
	"tollgate/infra/usage"
	"tollgate/tenants"
	"tollgate/tenants/postgres/pgtest"
	"tollgate/tenants/smtp/smtptest"
	"tollgate/web"
)

// TestUsageByConsumerAndRange: the usage page sums a date range by consumer and by route,
// each named and linked to its page; calls without a consumer and a deleted route are
// named as such; a bad range gets its messages at the fields.
func TestUsageByConsumerAndRange(t *testing.T) {
	e := fullConsole(t)
	owner := e.signUp("acme", true)
	ctx := context.Background()
	tn, _ := e.db.FindTenant(ctx, "acme")
	r := &tenants.Route{TenantID: tn.ID, Name: "hello", Paths: []string{"/hello"}, Auth: tenants.AuthKey,
		Upstream: tenants.Upstream{Targets: []tenants.Target{{URL: "https://api.example.com", Weight: 1}}}}
	cs := &tenants.Consumer{TenantID: tn.ID, Name: "mobile-app"}
	if err := e.db.CreateRoute(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := e.db.CreateConsumer(ctx, cs); err != nil {
		t.Fatal(err)
	}
	hour := billing.Hour(time.Now())
	rec := func(route, consumer string, n int64) usage.Record {
		return usage.Record{TenantID: tn.ID, Hour: hour, RouteID: route, ConsumerID: consumer, Class: 2, Counts: usage.Counts{Requests: n, Billable: n}}
	}
	gone := "01a00000-0000-7000-8000-000000000000"
	if _, err := billingpg.New(e.db.Pool()).Fold(ctx, &usage.Batch{ID: usage.BatchID("web-test", "usage", 1), EdgeID: "web-test", BootID: "usage", Seq: 1,
		Created: time.Now().UTC(), Records: []usage.Record{rec(r.ID, cs.ID, 7), rec(r.ID, "", 2), rec(gone, cs.ID, 1)}}); err != nil {
		t.Fatal(err)
	}
	pg := e.get(owner, "/console/t/acme/usage")
	consumers := between(pg.body, `data-testid="by-consumer"`, "</table>")
	routes := between(pg.body, `data-testid="by-route"`, "</table>")
	for _, want := range []string{`href="/console/t/acme/consumers/` + cs.ID + `">mobile-app</a>`, ">8<", "(no consumer: calls without a key or token)", ">2<"} {
		if !strings.Contains(consumers, want) {
			t.Errorf("by consumer lacks %q:\n%s", want, consumers)
		}
	}
	for _, want := range []string{`href="/console/t/acme/routes/` + r.ID + `">hello</a>`, ">9<", "(deleted route)"} {
		if !strings.Contains(routes, want) {
			t.Errorf("by route lacks %q:\n%s", want, routes)
		}
	}
	if !strings.Contains(pg.body, `data-testid="total">10<`) {
		t.Errorf("the month so far does not total 10")
	}

	// Any route is charted by its name, whether or not the list holds it; a name of no
	// route says so and charts the busiest.
	if pg := e.get(owner, "/console/t/acme/usage?route_name=hello"); !strings.Contains(pg.body, `<option value="`+r.ID+`" selected>hello</option>`) {
		t.Errorf("route_name=hello does not chart hello:\n%s", between(pg.body, `data-testid="latency"`, "</form>"))
	}
	if pg := e.get(owner, "/console/t/acme/usage?route_name=nope"); !strings.Contains(pg.body, `No route is named &#34;nope&#34;`) {
		t.Errorf("route_name=nope says nothing:\n%s", between(pg.body, `data-testid="latency"`, "</section>"))
	}

	// A range that ends before today's calls; then bad ones.
	if pg := e.get(owner, "/console/t/acme/usage?from=2026-01-01&to=2026-01-31"); pg.status != http.StatusOK || !strings.Contains(pg.body, `data-testid="total">0<`) {
		t.Errorf("January: %d", pg.status)
	}
	for q, field := range map[string]string{"from=2026-02-10&to=2026-02-01": "to-error", "from=yesterday": "from-error", "from=2020-01-01&to=2026-01-01": "to-error"} {
		if pg := e.get(owner, "/console/t/acme/usage?"+q); pg.status != http.StatusUnprocessableEntity || !strings.Contains(pg.body, `id="`+field+`"`) {
			t.Errorf("?%s: %d, want 422 with #%s", q, pg.status, field)
		}
	}
}

func between(s, from, to string) string {
	i := strings.Index(s, from)
	if i < 0 {
		return ""
	}
	s = s[i:]
	if j := strings.Index(s, to); j >= 0 {
		return s[:j]
	}
	return s
}

// Function time shows on the usage page (the range's total, by route and by consumer) and
// on the finance page (the month's time and its charge per row), in milliseconds.
func TestFunctionTimeShown(t *testing.T) {
	e, store := paymentsConsole(t)
	owner := e.signUp("acme", true)
	ctx := context.Background()
	if _, err := e.db.SetPlatformRole(ctx, owner.email, "finance"); err != nil {
		t.Fatal(err)
	}
	tn, _ := e.db.FindTenant(ctx, "acme")
	now := time.Now().UTC()
	if err := store.SetPrice(ctx, &billing.Price{Plan: tn.PlatformPlan, EffectiveFrom: billing.PeriodOf(now).String(), Currency: "usd",
		IncludedRequests: 1000, UnitPrice: 1, UnitRequests: 1000, FunctionUnitPrice: 100, FunctionUnitMS: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Fold(ctx, &usage.Batch{ID: usage.BatchID("web-test", "fn", 1), EdgeID: "web-test", BootID: "fn", Seq: 1, Created: now,
		Records: []usage.Record{{TenantID: tn.ID, Hour: billing.Hour(now), RouteID: "r", Class: 2,
			Counts: usage.Counts{Requests: 3, Billable: 3, FunctionUS: 2_012_345}}}}); err != nil {
		t.Fatal(err)
	}
	pg := e.get(owner, "/console/t/acme/usage")
	if !strings.Contains(pg.body, `data-testid="function-ms">2,012.345<`) || !strings.Contains(between(pg.body, `data-testid="by-route"`, "</table>"), ">2,012.345<") {
		t.Fatalf("usage page without function time:\n%s", pg.body)
	}
	pg = e.get(owner, "/console/finance")
	preview := between(pg.body, `data-testid="export-preview"`, "</table>")
	// 2,012.345 ms at 1.00 USD per ms, rounded up to the cent: 201,235 cents.
	if pg.status != http.StatusOK || !strings.Contains(preview, `data-testid="function-ms">2,012.345<`) || !strings.Contains(preview, "2,012.35 USD") {
		t.Fatalf("finance page: %d\n%s", pg.status, preview)
	}
}

// The platform price form takes function time's allowance, price and unit, shows a
// refusal at its field, and lists the price.
func TestPriceFormFunctionTime(t *testing.T) {
	db, _ := pgtest.Open(t)
	mail := smtptest.Start(t)
	store := billingpg.New(db.Pool())
	c := web.New(web.Config{Tenants: db, Routes: db, Consumers: db, People: db, Audit: db, Plans: db,
		Usage: store, Prices: store, Mailer: mail.Mailer(t), PublicURL: "https://console.tollgate.test"})
	app := fiber.New(fiber.Config{Immutable: true})
	c.Mount(app)
	e := &consoleEnv{t: t, app: app, db: db, mail: mail}
	fin := e.signUp("acme", true)
	ctx := context.Background()
	if _, err := db.SetPlatformRole(ctx, fin.email, "finance"); err != nil {
		t.Fatal(err)
	}
	month := billing.PeriodOf(time.Now()).String()
	form := func(fnPrice string) url.Values {
		return url.Values{"_csrf": {fin.csrf}, "plan": {"pro"}, "effective_from": {month}, "currency": {"usd"},
			"unit_requests": {"1000"}, "included_function_ms": {"1,000"}, "function_unit_price": {fnPrice}, "function_unit_ms": {"1000"}}
	}
	if pg := e.post(fin, "/console/finance/prices", form("0.5x")); !strings.Contains(pg.body, `id="function_unit_price-error"`) {
		t.Fatalf("a bad function price: %d\n%s", pg.status, pg.body)
	}
	if pg := e.raw(fin, "/console/finance/prices", form("0.02")); pg.status != http.StatusSeeOther {
		t.Fatalf("save: %d\n%s", pg.status, pg.body)
	}
	p, err := store.PriceAt(ctx, "", "pro", billing.PeriodOf(time.Now()))
	if err != nil || p.IncludedFunctionMS != 1000 || p.FunctionUnitPrice != 2 || p.FunctionUnitMS != 1000 {
		t.Fatalf("stored %+v %v", p, err)
	}
	if pg := e.get(fin, "/console/finance/prices"); !strings.Contains(pg.body, "0.02 USD per 1,000 ms over 1,000 ms") {
		t.Fatalf("prices page:\n%s", between(pg.body, `data-testid="price-versions"`, "</table>"))
	}
}
