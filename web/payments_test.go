package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/billing"
	billingpg "tollgate/billing/postgres"
	billingstripe "tollgate/billing/stripe"
	"tollgate/infra/testenv"
	"tollgate/tenants"
	"tollgate/tenants/postgres/pgtest"
	"tollgate/tenants/smtp/smtptest"
	"tollgate/web"
)

func paymentsConsole(t *testing.T) (*consoleEnv, *billingpg.Store) {
	e, store, _ := connectConsole(t, nil)
	return e, store
}

// connectConsole is a console whose payments page connects accounts through stripe-mock;
// with finished set, Stripe answers that an account finished onboarding (stripe-mock keeps
// no state, so its accounts never get there by themselves).
func connectConsole(t *testing.T, finished *atomic.Bool) (*consoleEnv, *billingpg.Store, *billingstripe.Connect) {
	t.Helper()
	db, _ := pgtest.Open(t)
	mail := smtptest.Start(t)
	store := billingpg.New(db.Pool())
	target, _ := url.Parse(testenv.StripeMock(t))
	rp := httputil.NewSingleHostReverseProxy(target)
	var seq atomic.Int64
	rp.ModifyResponse = func(res *http.Response) error {
		path := res.Request.URL.Path
		created := res.Request.Method == http.MethodPost && path == "/v1/accounts"
		done := res.Request.Method == http.MethodGet && strings.HasPrefix(path, "/v1/accounts/") && finished != nil && finished.Load()
		if !created && !done {
			return nil
		}
		var obj map[string]any
		if err := json.NewDecoder(res.Body).Decode(&obj); err != nil {
			return err
		}
		if created { // Stripe's ids are unique; stripe-mock answers one fixture
			obj["id"] = fmt.Sprintf("acct_web%d", seq.Add(1))
		} else {
			obj["charges_enabled"], obj["details_submitted"] = true, true
		}
		b, _ := json.Marshal(obj)
		res.Body = io.NopCloser(bytes.NewReader(b))
		res.ContentLength = int64(len(b))
		res.Header.Set("Content-Length", strconv.Itoa(len(b)))
		return nil
	}
	mock := httptest.NewServer(rp)
	t.Cleanup(mock.Close)
	ps, err := billingstripe.New(billingstripe.Config{Key: "sk_test_123", URL: mock.URL, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	cn, err := billingstripe.NewConnect(ps, store)
	if err != nil {
		t.Fatal(err)
	}
	c := web.New(web.Config{Tenants: db, Routes: db, Consumers: db, People: db, Audit: db, Plans: db,
		Usage: store, Payments: store, Connect: cn, Mailer: mail.Mailer(t), PublicURL: "https://console.tollgate.test"})
	app := fiber.New(fiber.Config{Immutable: true})
	c.Mount(app)
	return &consoleEnv{t: t, app: app, db: db, mail: mail}, store, cn
}

// An owner connects a Stripe account through Stripe's onboarding (no field takes an id)
// and sees the consumers' checkouts; a member without the admin role may do neither.
func TestPaymentsPage(t *testing.T) {
	var finished atomic.Bool
	e, store, _ := connectConsole(t, &finished)
	owner := e.signUp("acme", true)
	ctx := context.Background()
	tn, _ := e.db.FindTenant(ctx, "acme")
	const base = "/console/t/acme/payments"

	if pg := e.get(owner, base); pg.status != http.StatusOK || strings.Contains(pg.body, `name="account_id"`) ||
		!strings.Contains(pg.body, `data-status="none"`) || !strings.Contains(pg.body, "No consumer has started a checkout") {
		t.Fatalf("payments page: %d\n%s", pg.status, pg.body)
	}
	// The old form's field changes nothing now.
	if pg := e.raw(owner, base, url.Values{"_csrf": {owner.csrf}, "account_id": {"acct_1Evil"}}); pg.status == http.StatusSeeOther {
		t.Fatalf("the typed-in form is still served: %d %q", pg.status, pg.location)
	}
	if a, _ := store.ConnectStatus(ctx, tn.ID); a.Status != billing.ConnectNone {
		t.Fatalf("after a typed id: %+v", a)
	}

	go1 := e.raw(owner, base+"/connect", url.Values{"_csrf": {owner.csrf}})
	if go1.status != http.StatusSeeOther || !strings.HasPrefix(go1.location, "https://") {
		t.Fatalf("connect: %d %q\n%s", go1.status, go1.location, go1.body)
	}
	a, _ := store.ConnectStatus(ctx, tn.ID)
	if a.Status != billing.ConnectOnboarding || !strings.HasPrefix(a.AccountID, "acct_web") {
		t.Fatalf("after connect: %+v", a)
	}
	entries, _, err := e.db.ListAudit(ctx, tn.ID, tenants.AuditQuery{Page: tenants.Page{Limit: 1}})
	if err != nil || len(entries) != 1 || entries[0].Action != "stripe_account.create" || entries[0].Object != a.AccountID {
		t.Fatalf("audit: %+v %v", entries, err)
	}
	// Back from Stripe unfinished, then finished.
	if back := e.get(owner, base+"/connect/return"); back.location != base+"?done=account-pending" {
		t.Fatalf("return before finishing: %d %q", back.status, back.location)
	}
	if pg := e.get(owner, base); !strings.Contains(pg.body, `data-status="onboarding"`) || !strings.Contains(pg.body, "Continue onboarding with Stripe") {
		t.Fatalf("page while onboarding:\n%s", pg.body)
	}
	if again := e.get(owner, base+"/connect/refresh"); again.status != http.StatusSeeOther || !strings.HasPrefix(again.location, "https://") {
		t.Fatalf("refresh_url: %d %q", again.status, again.location)
	}
	finished.Store(true)
	if back := e.get(owner, base+"/connect/return"); back.location != base+"?done=account-ready" {
		t.Fatalf("return after finishing: %d %q", back.status, back.location)
	}
	if ready, _ := store.ConnectStatus(ctx, tn.ID); ready.Status != billing.ConnectReady || ready.AccountID != a.AccountID {
		t.Fatalf("after return: %+v", ready)
	}

	cs := &tenants.Consumer{TenantID: tn.ID, Name: "mobile-app"}
	if err := e.db.CreateConsumer(ctx, cs); err != nil {
		t.Fatal(err)
	}
	if err := store.RecordCheckout(ctx, &billing.CheckoutSession{SessionID: "cs_1", TenantID: tn.ID, ConsumerID: cs.ID,
		Plan: "gold", Amount: 900, Currency: "usd"}); err != nil {
		t.Fatal(err)
	}
	pg := e.get(owner, base)
	if !strings.Contains(pg.body, `data-status="ready"`) || !strings.Contains(pg.body, "<code>"+a.AccountID+"</code>") ||
		!strings.Contains(pg.body, ">mobile-app<") || !strings.Contains(pg.body, "9.00 USD") || !strings.Contains(pg.body, "the platform (invoice it yourself)") {
		t.Fatalf("page after connecting:\n%s", pg.body)
	}
	if removed := e.raw(owner, base+"/disconnect", url.Values{"_csrf": {owner.csrf}}); removed.location != base+"?done=account-removed" {
		t.Fatalf("disconnect: %d %q", removed.status, removed.location)
	}
	if gone, _ := store.ConnectStatus(ctx, tn.ID); gone.Status != billing.ConnectNone {
		t.Fatalf("after disconnect: %+v", gone)
	}

	member := e.signUp("other", true)
	if _, err := e.db.Pool().Exec(ctx, `INSERT INTO memberships (tenant_id, user_id, role) VALUES ($1, $2, $3)`,
		tn.ID, member.id, tenants.RoleDeveloper); err != nil {
		t.Fatal(err)
	}
	if pg := e.get(member, base); pg.status != http.StatusForbidden {
		t.Fatalf("a developer opened the payments page: %d", pg.status)
	}
	if pg := e.raw(member, base+"/connect", url.Values{"_csrf": {member.csrf}}); pg.status == http.StatusSeeOther {
		t.Fatalf("a developer started onboarding: %d %q", pg.status, pg.location)
	}
}

// An id typed in before onboarding existed shows as unproven, with a way to connect
// through Stripe or remove it.
func TestPaymentsPageTypedAccount(t *testing.T) {
	e, store, _ := connectConsole(t, nil)
	owner := e.signUp("acme", true)
	ctx := context.Background()
	tn, _ := e.db.FindTenant(ctx, "acme")
	if _, err := e.db.Pool().Exec(ctx, `INSERT INTO stripe_accounts (tenant_id, account_id) VALUES ($1, 'acct_1Typed')`, tn.ID); err != nil {
		t.Fatal(err)
	}
	pg := e.get(owner, "/console/t/acme/payments")
	if !strings.Contains(pg.body, `data-status="unproven"`) || !strings.Contains(pg.body, "<code>acct_1Typed</code>") ||
		!strings.Contains(pg.body, "Connect with Stripe") || !strings.Contains(pg.body, ">Remove<") {
		t.Fatalf("page with a typed id:\n%s", pg.body)
	}
	if removed := e.raw(owner, "/console/t/acme/payments/disconnect", url.Values{"_csrf": {owner.csrf}}); removed.status != http.StatusSeeOther {
		t.Fatalf("remove: %d", removed.status)
	}
	if a, _ := store.ConnectStatus(ctx, tn.ID); a.Status != billing.ConnectNone {
		t.Fatalf("after remove: %+v", a)
	}
}

// The finance page shows each paying tenant's subscription and latest invoice.
func TestFinancePagePayments(t *testing.T) {
	e, store := paymentsConsole(t)
	owner := e.signUp("acme", true)
	ctx := context.Background()
	if _, err := e.db.SetPlatformRole(ctx, owner.email, "finance"); err != nil {
		t.Fatal(err)
	}
	tn, _ := e.db.FindTenant(ctx, "acme")
	end := time.Now().UTC().AddDate(0, 1, 0)
	if err := store.SaveSubscription(ctx, &billing.Subscription{TenantID: tn.ID, CustomerID: "cus_1", SubscriptionID: "sub_1",
		Generation: 1, Plan: "pro", EffectiveFrom: "2026-01", Status: "past_due", CurrentPeriodEnd: &end}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.SetCustomer(ctx, tn.ID, "cus_1"); err != nil {
		t.Fatal(err)
	}
	start := billing.PeriodOf(time.Now()).Start()
	if _, err := store.ApplyInvoice(ctx, "evt_1", "invoice.payment_failed", "", &billing.Invoice{ID: "in_1", CustomerID: "cus_1",
		Status: "open", AmountDue: 4900, Currency: "usd", PeriodStart: &start, HostedURL: "https://invoice.stripe.com/i/1"}); err != nil {
		t.Fatal(err)
	}
	pg := e.get(owner, "/console/finance")
	if pg.status != http.StatusOK || !strings.Contains(pg.body, `data-testid="payments"`) || !strings.Contains(pg.body, "past_due") ||
		!strings.Contains(pg.body, `href="https://invoice.stripe.com/i/1"`) || !strings.Contains(pg.body, "49.00 USD") {
		t.Fatalf("finance page: %d\n%s", pg.status, pg.body)
	}
}
