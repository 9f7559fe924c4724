package stripe_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"tollgate/billing"
	"tollgate/billing/billingtest"
	billingstripe "tollgate/billing/stripe"
	"tollgate/tenants"
)

// fakePrices answers PriceAt from a map of platform plan → price (billing/postgres's
// prices have their own tests; these are about what is sent to Stripe).
type fakePrices struct {
	mu sync.Mutex
	m  map[string]*billing.Price
}

func (f *fakePrices) PriceAt(_ context.Context, tenantID, plan string, _ billing.Period) (*billing.Price, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.m[plan]; ok && tenantID == "" {
		cp := *p
		return &cp, nil
	}
	return nil, tenants.Errorf(tenants.ENotFound, "plan %q is unpriced", plan)
}

func thisMonth() string { return billing.PeriodOf(time.Now().UTC()).String() }

func newSubscriber(t *testing.T, db *billingtest.DB, proxy *stripeProxy, prices *fakePrices) *billingstripe.Subscriber {
	t.Helper()
	s, err := billingstripe.NewSubscriber(billingstripe.SubscriberConfig{
		Pusher: newPusher(t, db, proxy, &clock{}), Store: db.Store, Prices: prices,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func setPlan(t *testing.T, db *billingtest.DB, tn *tenants.Tenant, plan string) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.Tenants.FindPlatformPlan(ctx, plan); tenants.ErrorCode(err) == tenants.ENotFound {
		if err := db.Tenants.PutPlatformPlan(ctx, &tenants.PlatformPlan{Name: plan}); err != nil {
			t.Fatal(err)
		}
	}
	cur, err := db.Tenants.FindTenant(ctx, tn.Slug)
	if err != nil {
		t.Fatal(err)
	}
	cur.PlatformPlan = plan
	if err := db.Tenants.UpdateTenant(ctx, cur); err != nil {
		t.Fatal(err)
	}
}

func sync1(t *testing.T, s *billingstripe.Subscriber, want int) {
	t.Helper()
	if n, err := s.Sync(context.Background()); err != nil || n != want {
		t.Fatalf("sync changed %d (want %d): %v", n, want, err)
	}
}

// A paying tenant gets one customer and one subscription (fee + metered usage on the
// meter), made once; a new plan swaps the subscription's items; a free plan cancels it.
func TestSubscriberLifecycle(t *testing.T) {
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	db.Tenant(t, "hobby", "free")
	db.Tenant(t, "legacy", "unpriced")
	proxy := newProxy(t)
	prices := &fakePrices{m: map[string]*billing.Price{
		"pro":      {Plan: "pro", EffectiveFrom: thisMonth(), Currency: "usd", MonthlyFee: 4900, IncludedRequests: 1_000_000, UnitPrice: 20, UnitRequests: 1000},
		"business": {Plan: "business", EffectiveFrom: thisMonth(), Currency: "usd", UnitPrice: 10, UnitRequests: 1000},
		"free":     {Plan: "free", EffectiveFrom: thisMonth(), Currency: "usd", IncludedRequests: 10000, UnitRequests: 1000},
	}}
	s := newSubscriber(t, db, proxy, prices)
	ctx := context.Background()

	sync1(t, s, 1)
	subs := proxy.find("POST", "/v1/subscriptions")
	if len(subs) != 1 || len(proxy.find("POST", "/v1/customers")) != 1 || len(proxy.find("POST", "/v1/products")) != 1 {
		t.Fatalf("creates: %+v", proxy.calls)
	}
	meters := proxy.find("POST", "/v1/billing/meters")
	if len(meters) != 1 || meters[0].form.Get("event_name") != "tollgate_requests" ||
		meters[0].form.Get("customer_mapping[event_payload_key]") != "stripe_customer_id" || meters[0].form.Get("value_settings[event_payload_key]") != "value" {
		t.Fatalf("meter: %+v", meters)
	}
	pr := proxy.find("POST", "/v1/prices")
	if len(pr) != 2 || pr[0].form.Get("unit_amount") != "4900" || pr[0].form.Get("recurring[usage_type]") != "licensed" ||
		pr[1].form.Get("recurring[usage_type]") != "metered" || pr[1].form.Get("recurring[meter]") == "" ||
		pr[1].form.Get("tiers[0][up_to]") != "1000000" || pr[1].form.Get("tiers[1][up_to]") != "inf" || pr[1].form.Get("tiers[1][unit_amount_decimal]") != "0.02" {
		t.Fatalf("prices: %+v", pr)
	}
	for _, c := range proxy.calls {
		if c.method == "POST" && c.idempotent == "" {
			t.Fatalf("a create without an Idempotency-Key: %+v", c)
		}
	}
	f := subs[0].form
	if subs[0].idempotent != "tollgate-subscription-"+tn.ID+"-1" || f.Get("items[0][price]") == "" || f.Get("items[1][price]") == "" ||
		f.Get("collection_method") != "send_invoice" || f.Get("metadata[tollgate_tenant_id]") != tn.ID {
		t.Fatalf("subscription create %+v", subs[0])
	}
	sub, err := db.Store.Subscription(ctx, tn.ID)
	if err != nil || sub.Plan != "pro" || sub.EffectiveFrom != thisMonth() || !strings.HasPrefix(sub.SubscriptionID, "sub_") || sub.Status == billing.Canceled {
		t.Fatalf("recorded %+v: %v", sub, err)
	}

	// Nothing changed: nothing is sent.
	before := len(proxy.calls)
	sync1(t, s, 0)
	if len(proxy.calls) != before {
		t.Fatalf("an idle sync called Stripe: %+v", proxy.calls[before:])
	}

	// A new plan: the same subscription's items change; no second subscription.
	setPlan(t, db, tn, "business")
	sync1(t, s, 1)
	ups := proxy.find("POST", "/v1/subscriptions/"+sub.SubscriptionID)
	if len(ups) != 1 || len(proxy.find("POST", "/v1/subscriptions")) != 1 {
		t.Fatalf("plan change: updates %+v", ups)
	}
	uf := ups[0].form
	added, deleted := 0, 0
	for i := 0; uf.Get(key(i, "id")) != "" || uf.Get(key(i, "price")) != ""; i++ {
		if uf.Get(key(i, "deleted")) == "true" {
			deleted++
		} else if uf.Get(key(i, "price")) != "" {
			added++
		}
	}
	if added != 1 || deleted == 0 || uf.Get("metadata[tollgate_plan]") != "business" {
		t.Fatalf("item changes %v (added %d, deleted %d)", uf, added, deleted)
	}
	if got, _ := db.Store.Subscription(ctx, tn.ID); got.Plan != "business" || got.SubscriptionID != sub.SubscriptionID {
		t.Fatalf("after the change %+v", got)
	}

	// A plan that charges nothing: cancelled, once.
	setPlan(t, db, tn, "free")
	sync1(t, s, 1)
	sync1(t, s, 0)
	if c := proxy.find("DELETE", "/v1/subscriptions/"+sub.SubscriptionID); len(c) != 1 {
		t.Fatalf("cancels %+v", c)
	}
	if got, _ := db.Store.Subscription(ctx, tn.ID); got.Status != billing.Canceled {
		t.Fatalf("after the cancel %+v", got)
	}

	// Paying again makes a new subscription under a new key; the price version's Stripe
	// objects are reused.
	setPlan(t, db, tn, "pro")
	sync1(t, s, 1)
	subs = proxy.find("POST", "/v1/subscriptions")
	if len(subs) != 2 || subs[1].idempotent != "tollgate-subscription-"+tn.ID+"-2" || len(proxy.find("POST", "/v1/products")) != 2 {
		t.Fatalf("resubscribe: %d creates, %d products", len(subs), len(proxy.find("POST", "/v1/products")))
	}
}

func key(i int, field string) string { return "items[" + string(rune('0'+i)) + "][" + field + "]" }

// A configured meter is used as is: none is looked up or made.
func TestSubscriberConfiguredMeter(t *testing.T) {
	db := billingtest.Open(t)
	db.Tenant(t, "acme", "metered")
	proxy := newProxy(t)
	s, err := billingstripe.NewSubscriber(billingstripe.SubscriberConfig{
		Pusher: newPusher(t, db, proxy, &clock{}), Store: db.Store, Meter: "mtr_configured",
		Prices: &fakePrices{m: map[string]*billing.Price{"metered": {Plan: "metered", EffectiveFrom: thisMonth(), Currency: "eur", UnitPrice: 5, UnitRequests: 100}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	sync1(t, s, 1)
	pr := proxy.find("POST", "/v1/prices")
	if len(pr) != 1 || pr[0].form.Get("recurring[meter]") != "mtr_configured" || pr[0].form.Get("unit_amount_decimal") != "0.05" ||
		proxy.count("/v1/billing/meters") != 0 {
		t.Fatalf("prices %+v, meter calls %d", pr, proxy.count("/v1/billing/meters"))
	}
}

// With billing/postgres's own prices: the version in effect this month subscribes the
// tenant, and the subscription records that version.
func TestSubscriberStoredPrices(t *testing.T) {
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	ctx := context.Background()
	if err := db.Store.SetPrice(ctx, &billing.Price{Plan: "pro", EffectiveFrom: thisMonth(), Currency: "usd",
		MonthlyFee: 2900, UnitPrice: 20, UnitRequests: 1000}); err != nil {
		t.Fatal(err)
	}
	proxy := newProxy(t)
	s, err := billingstripe.NewSubscriber(billingstripe.SubscriberConfig{
		Pusher: newPusher(t, db, proxy, &clock{}), Store: db.Store, Prices: db.Store, Meter: "mtr_1",
	})
	if err != nil {
		t.Fatal(err)
	}
	sync1(t, s, 1)
	sub, err := db.Store.Subscription(ctx, tn.ID)
	if err != nil || sub.Plan != "pro" || sub.EffectiveFrom != thisMonth() {
		t.Fatalf("subscription %+v: %v", sub, err)
	}
	sync1(t, s, 0)

	// This month's version replaced while in effect: new Stripe prices, the same
	// subscription's items swapped for them.
	if err := db.Store.SetPrice(ctx, &billing.Price{Plan: "pro", EffectiveFrom: thisMonth(), Currency: "usd",
		MonthlyFee: 3900, UnitPrice: 20, UnitRequests: 1000}); err != nil {
		t.Fatal(err)
	}
	sync1(t, s, 1)
	sync1(t, s, 0)
	fees := proxy.find("POST", "/v1/prices")
	if len(proxy.find("POST", "/v1/products")) != 2 || len(fees) != 4 || fees[2].form.Get("unit_amount") != "3900" ||
		len(proxy.find("POST", "/v1/subscriptions/"+sub.SubscriptionID)) != 1 || len(proxy.find("POST", "/v1/subscriptions")) != 1 {
		t.Fatalf("after replacing the price: %d products, prices %+v", len(proxy.find("POST", "/v1/products")), fees)
	}
}

// A price that charges function time subscribes the tenant even without a fee or a
// request price, with a metered item on the function time's meter (µs): the allowance in
// µs, the unit price per µs. A price finer than Stripe's decimals is refused, not made
// free.
func TestSubscriberChargesFunctionTime(t *testing.T) {
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "fn")
	proxy := newProxy(t)
	prices := &fakePrices{m: map[string]*billing.Price{
		"fn": {Plan: "fn", EffectiveFrom: thisMonth(), Currency: "usd", UnitRequests: 1000,
			IncludedFunctionMS: 60_000, FunctionUnitPrice: 3, FunctionUnitMS: 1000},
		"all": {Plan: "all", EffectiveFrom: thisMonth(), Currency: "usd", MonthlyFee: 900, UnitPrice: 20, UnitRequests: 1000,
			FunctionUnitPrice: 1, FunctionUnitMS: 3},
		"fine": {Plan: "fine", EffectiveFrom: thisMonth(), Currency: "usd", UnitRequests: 1000,
			FunctionUnitPrice: 1, FunctionUnitMS: 9_000_000_000_000_000},
	}}
	s := newSubscriber(t, db, proxy, prices)
	sync1(t, s, 1)
	meters := proxy.find("POST", "/v1/billing/meters")
	if len(meters) != 1 || meters[0].form.Get("event_name") != billingstripe.DefaultFunctionEventName {
		t.Fatalf("meters made: %+v", meters)
	}
	pr := proxy.find("POST", "/v1/prices")
	if len(pr) != 1 || pr[0].form.Get("recurring[usage_type]") != "metered" || pr[0].form.Get("recurring[meter]") == "" ||
		pr[0].form.Get("tiers[0][up_to]") != "60000000" || pr[0].form.Get("tiers[1][unit_amount_decimal]") != "0.000003" ||
		pr[0].form.Get("metadata[tollgate_unit]") != "function_us" {
		t.Fatalf("function price: %+v", pr)
	}
	subs := proxy.find("POST", "/v1/subscriptions")
	if len(subs) != 1 || subs[0].form.Get("items[0][price]") == "" || subs[0].form.Get("items[1][price]") != "" {
		t.Fatalf("subscription %+v", subs)
	}
	sync1(t, s, 0)

	// Fee, requests and function time: three items; the function meter is found again,
	// not made twice.
	setPlan(t, db, tn, "all")
	sync1(t, s, 1)
	pr = proxy.find("POST", "/v1/prices")
	if len(pr) != 4 || pr[3].form.Get("unit_amount_decimal") != "0.000333333333" || len(proxy.find("POST", "/v1/billing/meters")) != 1+1 {
		// The requests' meter is made here; the function meter was made above.
		t.Fatalf("prices %+v; meters %+v", pr, proxy.find("POST", "/v1/billing/meters"))
	}
	sub, err := db.Store.Subscription(context.Background(), tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	ups := proxy.find("POST", "/v1/subscriptions/"+sub.SubscriptionID)
	added := 0
	for i := 0; len(ups) == 1 && (ups[0].form.Get(key(i, "id")) != "" || ups[0].form.Get(key(i, "price")) != ""); i++ {
		if ups[0].form.Get(key(i, "deleted")) != "true" && ups[0].form.Get(key(i, "price")) != "" {
			added++
		}
	}
	if added != 3 {
		t.Fatalf("items added %d, want fee, requests and function time: %+v", added, ups)
	}

	setPlan(t, db, tn, "fine")
	if n, err := s.Sync(context.Background()); err == nil || n != 0 || !strings.Contains(err.Error(), "smallest amount") {
		t.Fatalf("a price finer than Stripe's decimals: %d changed, %v", n, err)
	}
	if len(proxy.find("POST", "/v1/prices")) != 4 || len(proxy.find("POST", "/v1/products")) != 2 {
		t.Fatalf("a product or price was made for it")
	}
}
