package stripe_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	stripeapi "github.com/stripe/stripe-go/v76"

	"tollgate/billing"
	"tollgate/billing/billingtest"
	billingstripe "tollgate/billing/stripe"
	"tollgate/tenants"
)

// paying is a consumer on plan basic with a checkout of plan gold (session cs_1), the
// webhook on a clock the test moves, and the time Stripe's events are made at.
type paying struct {
	t      *testing.T
	db     *billingtest.DB
	app    *fiber.App
	en     *billingstripe.Entitlements
	tenant *tenants.Tenant
	c      *tenants.Consumer
	base   time.Time
	off    atomic.Int64 // the clock's offset from base
}

func newPaying(t *testing.T) *paying {
	db := billingtest.Open(t)
	p := &paying{t: t, db: db, tenant: db.Tenant(t, "acme", "pro"), base: time.Now().UTC().Truncate(time.Second)}
	ctx := context.Background()
	for _, name := range []string{"basic", "gold"} {
		if err := db.Tenants.CreatePlan(ctx, &tenants.ConsumerPlan{TenantID: p.tenant.ID, Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	p.c = &tenants.Consumer{TenantID: p.tenant.ID, Name: "mobile-app", Plan: "basic"}
	if err := db.Tenants.CreateConsumer(ctx, p.c); err != nil {
		t.Fatal(err)
	}
	if err := db.Store.RecordCheckout(ctx, &billing.CheckoutSession{SessionID: "cs_1", TenantID: p.tenant.ID,
		ConsumerID: p.c.ID, Plan: "gold", Amount: 900, Currency: "usd"}); err != nil {
		t.Fatal(err)
	}
	w, err := billingstripe.NewWebhook(billingstripe.WebhookConfig{Secret: whsec, Store: db.Store, Consumers: db.Tenants,
		Logger: quiet, Now: func() time.Time { return p.base.Add(time.Duration(p.off.Load())) }})
	if err != nil {
		t.Fatal(err)
	}
	p.en = w.Entitlements()
	p.app = fiber.New(fiber.Config{ErrorHandler: func(c *fiber.Ctx, err error) error {
		code := tenants.ErrorCode(err)
		return c.Status(tenants.Status(code)).JSON(fiber.Map{"error": fiber.Map{"code": code}})
	}})
	p.app.Post("/v1/stripe/webhook", w.Handle)
	return p
}

// send delivers an event Stripe made at base+at, signed now, and fails unless it is
// answered 200 and recorded.
func (p *paying) send(id, typ string, at time.Duration, object map[string]any) {
	p.t.Helper()
	raw, _ := json.Marshal(object)
	body, _ := json.Marshal(map[string]any{
		"id": id, "object": "event", "type": typ, "api_version": stripeapi.APIVersion, "created": p.base.Add(at).Unix(),
		"data": map[string]any{"object": json.RawMessage(raw)},
	})
	st, code := deliver(p.t, p.app, body, whsec, time.Now())
	if st != 200 {
		p.t.Fatalf("%s %s: %d %s", id, typ, st, code)
	}
	seen, err := p.db.Store.EventSeen(context.Background(), id)
	if err != nil || !seen {
		p.t.Fatalf("%s not recorded: %v", id, err)
	}
}

// at moves the clock to base+d and sweeps, as the api does every minute.
func (p *paying) at(d time.Duration) {
	p.t.Helper()
	p.off.Store(int64(d))
	if _, err := p.en.Sweep(context.Background()); err != nil {
		p.t.Fatal(err)
	}
}

func (p *paying) wantPlan(want, why string) {
	p.t.Helper()
	c, err := p.db.Tenants.FindConsumer(context.Background(), p.tenant.ID, p.c.ID)
	if err != nil {
		p.t.Fatal(err)
	}
	if c.Plan != want {
		e, _ := p.db.Store.Entitlement(context.Background(), "cs_1")
		p.t.Fatalf("%s: consumer on %q, want %q (entitlement %+v)", why, c.Plan, want, e)
	}
}

func session(status string) map[string]any {
	return map[string]any{"id": "cs_1", "object": "checkout.session", "mode": "subscription", "subscription": "sub_1",
		"payment_status": status}
}

func invoice(id, status string) map[string]any {
	return map[string]any{"id": id, "object": "invoice", "customer": "cus_c", "subscription": "sub_1", "status": status,
		"amount_due": 900, "currency": "usd"}
}

func subscription(status string) map[string]any {
	return map[string]any{"id": "sub_1", "object": "subscription", "customer": "cus_c", "status": status}
}

const day = 24 * time.Hour

func TestCheckoutUnpaidGrantsNothing(t *testing.T) {
	p := newPaying(t)
	p.send("evt_1", "checkout.session.completed", 0, session("unpaid"))
	p.wantPlan("basic", "completed unpaid")
	e, _ := p.db.Store.Entitlement(context.Background(), "cs_1")
	if e.Status != billing.CheckoutPending || e.SubscriptionID != "sub_1" {
		t.Fatalf("entitlement %+v", e)
	}
	p.at(time.Hour)
	p.wantPlan("basic", "a sweep after completed unpaid")
	p.send("evt_2", "checkout.session.async_payment_succeeded", time.Hour, session("paid"))
	p.wantPlan("gold", "async payment succeeded")
}

func TestCheckoutAsyncPaymentFailed(t *testing.T) {
	p := newPaying(t)
	p.send("evt_1", "checkout.session.completed", 0, session("unpaid"))
	p.send("evt_2", "checkout.session.async_payment_failed", time.Hour, session("unpaid"))
	p.at(2 * time.Hour)
	p.wantPlan("basic", "async payment failed")
	// A stale success made before the failure changes nothing.
	p.send("evt_3", "checkout.session.async_payment_succeeded", time.Minute, session("paid"))
	p.wantPlan("basic", "a stale async success")
}

func TestPaymentFailedDowngradesAfterGrace(t *testing.T) {
	p := newPaying(t)
	p.send("evt_1", "checkout.session.completed", 0, session("paid"))
	p.wantPlan("gold", "completed paid")
	p.send("evt_2", "invoice.payment_failed", 30*day, invoice("in_2", "open"))
	p.send("evt_2", "invoice.payment_failed", 30*day, invoice("in_2", "open")) // Stripe retries: a duplicate
	p.at(32 * day)
	p.wantPlan("gold", "within the default 3 days' grace")
	p.at(33*day + time.Second)
	p.wantPlan("basic", "grace over")
	p.at(34 * day) // sweeping again changes nothing
	p.wantPlan("basic", "a second sweep")
	// A late payment cures it: the plan comes back.
	p.send("evt_3", "invoice.paid", 34*day, invoice("in_2", "paid"))
	p.wantPlan("gold", "paid after the downgrade")
}

func TestPaidWithinGraceKeepsPlan(t *testing.T) {
	p := newPaying(t)
	p.send("evt_1", "checkout.session.completed", 0, session("paid"))
	p.send("evt_2", "invoice.payment_failed", 30*day, invoice("in_2", "open"))
	p.send("evt_3", "invoice.paid", 31*day, invoice("in_2", "paid"))
	p.at(40 * day)
	p.wantPlan("gold", "paid within the grace")
	// Out of order: a failure made before the payment, delivered after it.
	p.send("evt_4", "invoice.payment_failed", 30*day+time.Hour, invoice("in_2", "open"))
	p.at(50 * day)
	p.wantPlan("gold", "a stale failure")
}

func TestOutOfOrderPaidBeforeFailed(t *testing.T) {
	p := newPaying(t)
	p.send("evt_1", "checkout.session.completed", 0, session("paid"))
	p.send("evt_3", "invoice.paid", 31*day, invoice("in_2", "paid"))
	p.send("evt_2", "invoice.payment_failed", 30*day, invoice("in_2", "open"))
	p.at(40 * day)
	p.wantPlan("gold", "a failure made before the payment that arrived first")
}

func TestSubscriptionEndTakesPlanBack(t *testing.T) {
	p := newPaying(t)
	p.send("evt_1", "checkout.session.completed", 0, session("paid"))
	p.wantPlan("gold", "completed paid")
	p.off.Store(int64(10 * day))
	p.send("evt_2", "customer.subscription.deleted", 10*day, subscription("canceled"))
	p.wantPlan("basic", "subscription deleted (no end grace by default)")
	// A payment made before the end, delivered after it, does not bring the plan back.
	p.send("evt_3", "invoice.paid", 9*day, invoice("in_1", "paid"))
	p.at(11 * day)
	p.wantPlan("basic", "a stale payment after the end")
}

func TestSubscriptionUnpaidWithTenantGrace(t *testing.T) {
	p := newPaying(t)
	if err := p.db.Store.SetPaymentGrace(context.Background(), p.tenant.ID, billing.PaymentGrace{FailureGraceDays: 0, EndGraceDays: 2}); err != nil {
		t.Fatal(err)
	}
	if err := p.db.Store.SetPaymentGrace(context.Background(), p.tenant.ID, billing.PaymentGrace{FailureGraceDays: 61}); tenants.ErrorCode(err) != tenants.EValidation {
		t.Fatalf("61 days: %v", err)
	}
	p.send("evt_1", "checkout.session.completed", 0, session("no_payment_required"))
	p.wantPlan("gold", "no payment required")
	p.send("evt_2", "customer.subscription.updated", 5*day, subscription("unpaid"))
	p.at(6 * day)
	p.wantPlan("gold", "within the tenant's 2 days of end grace")
	p.at(7 * day)
	p.wantPlan("basic", "end grace over")
}

// The plan a consumer was moved to by someone else is left alone.
func TestDowngradeLeavesAnotherPlanAlone(t *testing.T) {
	p := newPaying(t)
	ctx := context.Background()
	p.send("evt_1", "checkout.session.completed", 0, session("paid"))
	c, _ := p.db.Tenants.FindConsumer(ctx, p.tenant.ID, p.c.ID)
	c.Plan = ""
	if err := p.db.Tenants.UpdateConsumer(ctx, c); err != nil {
		t.Fatal(err)
	}
	p.send("evt_2", "customer.subscription.deleted", day, subscription("canceled"))
	p.wantPlan("", "a consumer the tenant moved off the plan")
}

// Several replicas sweeping at once take the plan back once: each session is applied by
// the one holding its lease.
func TestSweepReplicas(t *testing.T) {
	p := newPaying(t)
	ctx := context.Background()
	p.send("evt_1", "checkout.session.completed", 0, session("paid"))
	p.send("evt_2", "invoice.payment_failed", day, invoice("in_2", "open"))
	p.off.Store(int64(5 * day))
	errs := make(chan error, 4)
	for range 4 {
		en := &billingstripe.Entitlements{Store: p.db.Store, Consumers: p.db.Tenants, Logger: quiet, Now: func() time.Time { return p.base.Add(5 * day) }}
		go func() { _, err := en.Sweep(ctx); errs <- err }()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	p.wantPlan("basic", "after four sweeps")
	c, _ := p.db.Tenants.FindConsumer(ctx, p.tenant.ID, p.c.ID)
	if c.Version != p.c.Version+2 { // granted once, taken back once
		t.Fatalf("consumer version %d, created at %d: the plan changed more than twice", c.Version, p.c.Version)
	}
}
