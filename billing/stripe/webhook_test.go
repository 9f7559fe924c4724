package stripe_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	stripeapi "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"

	"tollgate/billing"
	"tollgate/billing/billingtest"
	billingstripe "tollgate/billing/stripe"
	"tollgate/tenants"
)

const whsec = "whsec_test_secret"

// webhookApp serves the webhook as the api does: errors become the envelope with their
// code's status.
func webhookApp(t *testing.T, db *billingtest.DB) *fiber.App {
	t.Helper()
	w, err := billingstripe.NewWebhook(billingstripe.WebhookConfig{Secret: whsec, Store: db.Store, Consumers: db.Tenants, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	app := fiber.New(fiber.Config{ErrorHandler: func(c *fiber.Ctx, err error) error {
		code := tenants.ErrorCode(err)
		return c.Status(tenants.Status(code)).JSON(fiber.Map{"error": fiber.Map{"code": code}})
	}})
	app.Post("/v1/stripe/webhook", w.Handle)
	return app
}

// event is a Stripe event of the type with the object as its data.
func event(id, typ string, object any) []byte {
	raw, _ := json.Marshal(object)
	b, _ := json.Marshal(map[string]any{
		"id": id, "object": "event", "type": typ, "api_version": stripeapi.APIVersion, "created": time.Now().Unix(),
		"data": map[string]any{"object": json.RawMessage(raw)},
	})
	return b
}

// deliver posts the payload signed with secret at ts and returns the status and error
// code.
func deliver(t *testing.T, app *fiber.App, payload []byte, secret string, ts time.Time) (int, string) {
	t.Helper()
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret, Timestamp: ts})
	req := httptest.NewRequest(http.MethodPost, "/v1/stripe/webhook", strings.NewReader(string(payload)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", signed.Header)
	res, err := app.Test(req, -1)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	var env struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.Unmarshal(body, &env)
	return res.StatusCode, env.Error.Code
}

func TestWebhookInvoicesOnce(t *testing.T) {
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	ctx := context.Background()
	if _, err := db.Store.SetCustomer(ctx, tn.ID, "cus_acme"); err != nil {
		t.Fatal(err)
	}
	app := webhookApp(t, db)
	start := billing.PeriodOf(time.Now().UTC()).Start()
	invoice := func(status string, paid int64) map[string]any {
		return map[string]any{"id": "in_1", "object": "invoice", "customer": "cus_acme", "status": status,
			"amount_due": 4900, "amount_paid": paid, "currency": "usd", "period_start": start.Unix(),
			"period_end": start.AddDate(0, 1, 0).Unix(), "hosted_invoice_url": "https://invoice.stripe.com/i/1"}
	}
	invoices := func() []billing.Invoice {
		list, err := db.Store.Invoices(ctx, billing.PeriodOf(start))
		if err != nil {
			t.Fatal(err)
		}
		return list
	}

	paid := event("evt_paid", "invoice.paid", invoice("paid", 4900))
	if st, code := deliver(t, app, paid, "whsec_wrong", time.Now()); st != 400 || code != tenants.EInvalidSignature {
		t.Fatalf("wrong secret: %d %s", st, code)
	}
	if st, code := deliver(t, app, paid, whsec, time.Now().Add(-10*time.Minute)); st != 400 || code != tenants.EInvalidSignature {
		t.Fatalf("replayed signature: %d %s", st, code)
	}
	if list := invoices(); len(list) != 0 {
		t.Fatalf("a refused event was applied: %+v", list)
	}

	if st, code := deliver(t, app, event("evt_open", "invoice.finalized", invoice("open", 0)), whsec, time.Now()); st != 200 {
		t.Fatalf("finalized: %d %s", st, code)
	}
	for i := 0; i < 2; i++ { // the second delivery is a duplicate
		if st, code := deliver(t, app, paid, whsec, time.Now()); st != 200 {
			t.Fatalf("paid #%d: %d %s", i, st, code)
		}
	}
	// A redelivery of the older event after the newer one changes nothing.
	deliver(t, app, event("evt_open", "invoice.finalized", invoice("open", 0)), whsec, time.Now())
	list := invoices()
	if len(list) != 1 || list[0].Status != "paid" || list[0].AmountPaid != 4900 || list[0].TenantID != tn.ID ||
		list[0].Tenant != "acme" || list[0].HostedURL == "" || list[0].Currency != "usd" {
		t.Fatalf("invoices %+v", list)
	}

	// A connected account's invoice (Connect) is recorded, not listed as the platform's.
	var connected map[string]any
	_ = json.Unmarshal(event("evt_connect", "invoice.paid", map[string]any{"id": "in_consumer", "customer": "cus_acme", "status": "paid",
		"period_start": start.Unix()}), &connected)
	connected["account"] = "acct_1Tenant"
	body, _ := json.Marshal(connected)
	if st, code := deliver(t, app, body, whsec, time.Now()); st != 200 {
		t.Fatalf("connect invoice: %d %s", st, code)
	}
	if list := invoices(); len(list) != 1 {
		t.Fatalf("a connected account's invoice was listed: %+v", list)
	}
	if st, code := deliver(t, app, []byte("not json"), whsec, time.Now()); st != 400 || code != tenants.EInvalidRequest {
		t.Fatalf("garbage: %d %s", st, code)
	}
	if st, _ := deliver(t, app, event("evt_other", "customer.created", map[string]any{"id": "cus_x"}), whsec, time.Now()); st != 200 {
		t.Fatalf("unknown type: %d", st)
	}
	if seen, _ := db.Store.EventSeen(ctx, "evt_other"); !seen {
		t.Fatal("an event of another type was not recorded")
	}
}

func TestWebhookSubscriptionStatus(t *testing.T) {
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	ctx := context.Background()
	if err := db.Store.SaveSubscription(ctx, &billing.Subscription{TenantID: tn.ID, CustomerID: "cus_acme",
		SubscriptionID: "sub_acme", Generation: 1, Plan: "pro", EffectiveFrom: "2026-01", Status: "active"}); err != nil {
		t.Fatal(err)
	}
	app := webhookApp(t, db)
	end := time.Now().Add(72 * time.Hour).Truncate(time.Second).UTC()
	sub := map[string]any{"id": "sub_acme", "object": "subscription", "customer": "cus_acme", "status": "past_due", "current_period_end": end.Unix()}
	if st, code := deliver(t, app, event("evt_1", "customer.subscription.updated", sub), whsec, time.Now()); st != 200 {
		t.Fatalf("%d %s", st, code)
	}
	got, _ := db.Store.Subscription(ctx, tn.ID)
	if got.Status != "past_due" || got.CurrentPeriodEnd == nil || !got.CurrentPeriodEnd.Equal(end) {
		t.Fatalf("after updated: %+v", got)
	}
	deliver(t, app, event("evt_2", "customer.subscription.deleted", sub), whsec, time.Now())
	if got, _ := db.Store.Subscription(ctx, tn.ID); got.Status != billing.Canceled {
		t.Fatalf("after deleted: %+v", got)
	}
}

// A completed checkout puts the consumer on its plan through the tenants store (audited
// as stripe, so the outbox carries it to the edges), once.
func TestWebhookCheckoutCompleted(t *testing.T) {
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	ctx := context.Background()
	for _, name := range []string{"basic", "gold"} {
		if err := db.Tenants.CreatePlan(ctx, &tenants.ConsumerPlan{TenantID: tn.ID, Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	c := &tenants.Consumer{TenantID: tn.ID, Name: "mobile-app", Plan: "basic"}
	if err := db.Tenants.CreateConsumer(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := db.Store.RecordCheckout(ctx, &billing.CheckoutSession{SessionID: "cs_1", TenantID: tn.ID, ConsumerID: c.ID,
		Plan: "gold", Amount: 900, Currency: "usd"}); err != nil {
		t.Fatal(err)
	}
	app := webhookApp(t, db)
	session := map[string]any{"id": "cs_1", "object": "checkout.session", "mode": "subscription", "subscription": "sub_c1",
		"payment_status": "paid", "metadata": map[string]string{"tenant_id": tn.ID, "consumer_id": c.ID, "plan": "gold"}}
	for i := 0; i < 2; i++ {
		if st, code := deliver(t, app, event("evt_cs", "checkout.session.completed", session), whsec, time.Now()); st != 200 {
			t.Fatalf("delivery %d: %d %s", i, st, code)
		}
	}
	got, err := db.Tenants.FindConsumer(ctx, tn.ID, c.ID)
	if err != nil || got.Plan != "gold" || got.Version != c.Version+1 {
		t.Fatalf("consumer %+v (was version %d): %v", got, c.Version, err)
	}
	cs, _ := db.Store.CheckoutSession(ctx, "cs_1")
	if cs.Status != billing.CheckoutPaid || cs.SubscriptionID != "sub_c1" || cs.CompletedAt == nil {
		t.Fatalf("checkout %+v", cs)
	}
	entries, _, err := db.Tenants.ListAudit(ctx, tn.ID, tenants.AuditQuery{Page: tenants.Page{Limit: 10}})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if e.Actor == billingstripe.AuditActor {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d audit entries by stripe, want 1: %s", n, auditDump(entries))
	}
	// A session Tollgate did not make changes no consumer.
	other := map[string]any{"id": "cs_unknown", "object": "checkout.session", "metadata": map[string]string{"tenant_id": tn.ID, "consumer_id": c.ID, "plan": "basic"}}
	if st, _ := deliver(t, app, event("evt_cs2", "checkout.session.completed", other), whsec, time.Now()); st != 200 {
		t.Fatalf("unknown session: %d", st)
	}
	if got, _ := db.Tenants.FindConsumer(ctx, tn.ID, c.ID); got.Plan != "gold" {
		t.Fatalf("an unknown session changed the plan: %+v", got)
	}
}

func auditDump(es []*tenants.AuditEntry) string {
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintf(&b, "%s %s %s; ", e.Actor, e.Action, e.Object)
	}
	return b.String()
}

// Checkout sessions are made on the tenant's connected account when it has one, else on
// the platform's; each is recorded pending with the account it was made on.
func TestCheckoutConnectedOrNot(t *testing.T) {
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	proxy := newProxy(t)
	co, err := billingstripe.NewCheckout(newPusher(t, db, proxy, &clock{}), db.Store)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := billing.CheckoutRequest{TenantID: tn.ID, ConsumerID: "c-1", Plan: "gold", Email: "dev@example.com",
		Price:      billing.Price{TenantID: tn.ID, Plan: "gold", EffectiveFrom: thisMonth(), Currency: "usd", MonthlyFee: 900},
		SuccessURL: "https://portal.example/ok?session={CHECKOUT_SESSION_ID}", CancelURL: "https://portal.example/plans"}
	url, err := co.StartCheckout(ctx, req)
	if err != nil || url == "" {
		t.Fatalf("url %q: %v", url, err)
	}
	// Connected through Stripe's onboarding, and Stripe said it takes charges (connect_test.go).
	if _, err := db.Store.AttachConnectedAccount(ctx, tn.ID, "acct_1Tenant"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Store.RecordConnectedAccount(ctx, tn.ID, "acct_1Tenant", true, true, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := co.StartCheckout(ctx, req); err != nil {
		t.Fatal(err)
	}
	calls := proxy.find("POST", "/v1/checkout/sessions")
	if len(calls) != 2 || calls[0].account != "" || calls[1].account != "acct_1Tenant" {
		t.Fatalf("sessions %+v", calls)
	}
	f := calls[0].form
	for k, want := range map[string]string{
		"mode": "subscription", "customer_email": "dev@example.com", "client_reference_id": "c-1",
		"line_items[0][price_data][unit_amount]": "900", "line_items[0][price_data][currency]": "usd",
		"line_items[0][price_data][recurring][interval]": "month", "line_items[0][quantity]": "1",
		"metadata[tenant_id]": tn.ID, "metadata[consumer_id]": "c-1", "metadata[plan]": "gold",
		"subscription_data[metadata][consumer_id]": "c-1", "success_url": req.SuccessURL,
	} {
		if f.Get(k) != want {
			t.Fatalf("%s = %q, want %q (form %v)", k, f.Get(k), want, f)
		}
	}
	if calls[0].idempotent == "" {
		t.Fatal("a session create without an Idempotency-Key")
	}
	list, err := db.Store.Checkouts(ctx, tn.ID, 2)
	if err != nil || len(list) != 2 {
		t.Fatalf("checkouts %+v: %v", list, err)
	}
	accounts := map[string]bool{}
	for _, c := range list {
		if c.Status != billing.CheckoutPending || c.Amount != 900 || c.Plan != "gold" {
			t.Fatalf("checkout %+v", c)
		}
		accounts[c.Account] = true
	}
	if !accounts[""] || !accounts["acct_1Tenant"] {
		t.Fatalf("accounts recorded %v", accounts)
	}

	// A plan that charges only for usage: the session collects a payment method.
	usage := req
	usage.Price.MonthlyFee, usage.Price.UnitPrice, usage.Price.UnitRequests = 0, 5, 1000
	if _, err := co.StartCheckout(ctx, usage); err != nil {
		t.Fatal(err)
	}
	calls = proxy.find("POST", "/v1/checkout/sessions")
	if f := calls[2].form; f.Get("mode") != "setup" || f.Get("currency") != "usd" || f.Get("line_items[0][quantity]") != "" ||
		f.Get("metadata[plan]") != "gold" || f.Get("customer_creation") != "always" {
		t.Fatalf("usage-only session %v", f)
	}
	free := usage
	free.Price.UnitPrice = 0
	if _, err := co.StartCheckout(ctx, free); tenants.ErrorCode(err) != tenants.EValidation {
		t.Fatalf("a plan without a fee: %v", err)
	}
	var te *tenants.Error
	if err := db.Store.SetConnectedAccount(ctx, tn.ID, "acc_nope"); !errors.As(err, &te) || te.Field != "account_id" {
		t.Fatalf("bad account id: %v", err)
	}
}
