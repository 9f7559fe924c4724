package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	stripeapi "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"
)

// Through the real api process: a consumer's plan bought through Checkout is granted only
// once Stripe says paid, taken back when its payment fails (the tenant's grace set to 0
// days) and given back by a later payment, and taken back for good when the subscription
// ends; each change reaches the outbox for the edges. A price that could overflow a bill
// is refused.
func TestStripePaymentsFollowTheMoney(t *testing.T) {
	s := newStack(t)
	const secret = "whsec_e2e_payments"
	_, api := s.startAPI("TOLLGATE_STRIPE_WEBHOOK_SECRET=" + secret)
	tenantID := str(t, api.createTenant("seller"), "id")
	for _, plan := range []string{"basic", "gold"} {
		api.must(201, http.MethodPost, "/v1/tenants/seller/plans", map[string]any{"name": plan})
	}
	consumerID := str(t, api.must(201, http.MethodPost, "/v1/tenants/seller/consumers", map[string]any{"name": "app", "plan": "basic"}), "id")

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// The session the portal made (recorded pending when the consumer clicked Buy).
	if _, err := conn.Exec(ctx, `INSERT INTO stripe_checkouts (session_id, tenant_id, consumer_id, plan, amount, currency)
		VALUES ('cs_e2e', $1, $2, 'gold', 900, 'usd')`, tenantID, consumerID); err != nil {
		t.Fatal(err)
	}

	created := time.Now().Unix() - 60 // events Stripe made in the last minute
	deliver := func(id, typ string, object map[string]any) {
		t.Helper()
		created++ // each event is a second after the one before, as Stripe would make them
		obj, _ := json.Marshal(object)
		payload, _ := json.Marshal(map[string]any{"id": id, "object": "event", "type": typ, "api_version": stripeapi.APIVersion,
			"created": created, "data": map[string]any{"object": json.RawMessage(obj)}})
		signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret})
		req, _ := http.NewRequest(http.MethodPost, api.base+"/v1/stripe/webhook", strings.NewReader(string(payload)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Stripe-Signature", signed.Header)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 {
			t.Fatalf("%s %s: %d %s", id, typ, res.StatusCode, raw)
		}
	}
	wantPlan := func(want, why string) {
		t.Helper()
		got := api.must(200, http.MethodGet, "/v1/tenants/seller/consumers/"+consumerID, nil)["plan"]
		if got == nil {
			got = ""
		}
		if got != want {
			t.Fatalf("%s: consumer on %v, want %q", why, got, want)
		}
		// The edges learn the plan from the outbox, as from any plan change.
		var value string
		err := conn.QueryRow(ctx, `SELECT convert_from(value, 'UTF8') FROM outbox WHERE key LIKE '%' || $1 || '%'
			ORDER BY id DESC LIMIT 1`, consumerID).Scan(&value)
		if err != nil || !strings.Contains(value, `"plan":"`+want+`"`) && !(want == "" && !strings.Contains(value, `"plan"`)) {
			t.Fatalf("%s: the consumer's last outbox entry %s: %v", why, value, err)
		}
	}
	session := func(status string) map[string]any {
		return map[string]any{"id": "cs_e2e", "object": "checkout.session", "mode": "subscription", "subscription": "sub_e2e", "payment_status": status}
	}
	invoice := map[string]any{"id": "in_e2e", "object": "invoice", "customer": "cus_e2e", "subscription": "sub_e2e", "amount_due": 900, "currency": "usd"}

	deliver("evt_p1", "checkout.session.completed", session("unpaid"))
	wantPlan("basic", "completed unpaid")
	deliver("evt_p2", "checkout.session.async_payment_succeeded", session("paid"))
	wantPlan("gold", "async payment succeeded")

	api.must(200, http.MethodPut, "/v1/tenants/seller/billing/payment-grace", map[string]any{"failure_grace_days": 0, "end_grace_days": 0})
	deliver("evt_p3", "invoice.payment_failed", invoice)
	deliver("evt_p3", "invoice.payment_failed", invoice) // Stripe's retry: a duplicate
	wantPlan("basic", "payment failed, no grace")
	deliver("evt_p4", "invoice.paid", invoice)
	wantPlan("gold", "paid after the failure")
	deliver("evt_p5", "customer.subscription.deleted", map[string]any{"id": "sub_e2e", "object": "subscription", "status": "canceled"})
	wantPlan("basic", "subscription deleted")

	// Amounts Stripe cannot charge, and bills that would wrap, are refused.
	month := time.Now().UTC().Format("2006-01")
	for _, body := range []map[string]any{
		{"currency": "usd", "monthly_fee": int64(9223372036854775807)},
		{"currency": "usd", "unit_price": int64(4600000000000000000), "unit_requests": 1},
	} {
		r := api.call(http.MethodPut, "/v1/tenants/seller/prices/gold/"+month, body)
		if r.Status != 400 || !strings.Contains(string(r.Raw), `"validation_failed"`) || !strings.Contains(string(r.Raw), `"request_id"`) {
			t.Fatalf("price %v: %s", body, r)
		}
	}
}
