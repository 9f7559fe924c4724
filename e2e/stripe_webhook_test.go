package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	stripeapi "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"

	"tollgate/billing"
)

// Stripe's webhooks reach the api without a token: a wrong signature is refused with
// nothing applied, and each event is applied once however often it is delivered, as the
// finance role's GET /v1/billing/invoices shows.
func TestStripeWebhook(t *testing.T) {
	s := newStack(t)
	const secret = "whsec_e2e_secret"
	_, api := s.startAPI("TOLLGATE_STRIPE_WEBHOOK_SECRET=" + secret)
	tenantID := str(t, api.createTenant("paying"), "id")

	// The tenant is a Stripe customer (what `tollgate billing enable` records).
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO billing_customers (tenant_id, stripe_customer_id) VALUES ($1, 'cus_e2e')`, tenantID); err != nil {
		t.Fatal(err)
	}

	period := billing.PeriodOf(time.Now().UTC())
	invoice := func(id, typ, status string, paid int64) []byte {
		obj, _ := json.Marshal(map[string]any{"id": "in_e2e", "object": "invoice", "customer": "cus_e2e", "status": status,
			"amount_due": 4900, "amount_paid": paid, "currency": "usd", "period_start": period.Start().Unix(),
			"period_end": period.End().Unix(), "hosted_invoice_url": "https://invoice.stripe.com/i/e2e"})
		b, _ := json.Marshal(map[string]any{"id": id, "object": "event", "type": typ, "api_version": stripeapi.APIVersion,
			"created": time.Now().Unix(), "data": map[string]any{"object": json.RawMessage(obj)}})
		return b
	}
	deliver := func(payload []byte, secret string) (int, string) {
		t.Helper()
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
		return res.StatusCode, string(raw)
	}
	invoices := func() []billing.Invoice {
		t.Helper()
		body := api.call(http.MethodGet, "/v1/billing/invoices?period="+period.String(), nil)
		if body.Status != 200 {
			t.Fatalf("invoices: %s", body)
		}
		var list struct{ Invoices []billing.Invoice }
		if err := json.Unmarshal(body.Raw, &list); err != nil {
			t.Fatal(err)
		}
		return list.Invoices
	}

	finalized := invoice("evt_e2e_open", "invoice.finalized", "open", 0)
	paid := invoice("evt_e2e_paid", "invoice.paid", "paid", 4900)
	if st, body := deliver(paid, "whsec_not_the_secret"); st != 400 || !strings.Contains(body, `"invalid_signature"`) {
		t.Fatalf("wrong signature: %d %s", st, body)
	}
	if list := invoices(); len(list) != 0 {
		t.Fatalf("a refused event was applied: %+v", list)
	}
	for i, p := range [][]byte{finalized, paid, paid, finalized} {
		if st, body := deliver(p, secret); st != 200 {
			t.Fatalf("delivery %d: %d %s", i, st, body)
		}
	}
	list := invoices()
	if len(list) != 1 || list[0].Status != "paid" || list[0].AmountPaid != 4900 || list[0].Tenant != "paying" {
		t.Fatalf("after deliveries (open, paid, paid again, open again): %+v", list)
	}
	var events int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM stripe_webhook_events`).Scan(&events); err != nil || events != 2 {
		t.Fatalf("%d events recorded, want 2: %v", events, err)
	}

	// Invoices are the finance role's: a tenant's token may not list them.
	tok := api.must(201, http.MethodPost, "/v1/tenants/paying/tokens", map[string]any{"name": "ci"})
	other := *api
	other.token = fmt.Sprint(tok["token"])
	if r := other.call(http.MethodGet, "/v1/billing/invoices", nil); r.Status != 403 {
		t.Fatalf("a tenant token listed invoices: %s", r)
	}
}
