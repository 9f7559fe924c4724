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
	"tollgate/tenants"
	"tollgate/tenants/postgres/pgtest"
	"tollgate/tenants/smtp/smtptest"
	"tollgate/web"
)

func paymentsConsole(t *testing.T) (*consoleEnv, *billingpg.Store) {
	t.Helper()
	db, _ := pgtest.Open(t)
	mail := smtptest.Start(t)
	store := billingpg.New(db.Pool())
	c := web.New(web.Config{Tenants: db, Routes: db, Consumers: db, People: db, Audit: db, Plans: db,
		Usage: store, Payments: store, Mailer: mail.Mailer(t), PublicURL: "https://console.tollgate.test"})
	app := fiber.New(fiber.Config{Immutable: true})
	c.Mount(app)
	return &consoleEnv{t: t, app: app, db: db, mail: mail}, store
}

// An owner connects a Stripe account (a bad id is refused at the field) and sees the
// consumers' checkouts; a member without the admin role may not open the page.
func TestPaymentsPage(t *testing.T) {
	e, store := paymentsConsole(t)
	owner := e.signUp("acme", true)
	ctx := context.Background()
	tn, _ := e.db.FindTenant(ctx, "acme")
	const base = "/console/t/acme/payments"

	if pg := e.get(owner, base); pg.status != http.StatusOK || !strings.Contains(pg.body, `id="account_id"`) ||
		!strings.Contains(pg.body, "No consumer has started a checkout") {
		t.Fatalf("payments page: %d\n%s", pg.status, pg.body)
	}
	bad := e.post(owner, base, url.Values{"account_id": {"sk_live_oops"}})
	if !strings.Contains(bad.body, `id="account_id-error"`) || !strings.Contains(bad.body, `value="sk_live_oops"`) {
		t.Fatalf("a bad account id: %d\n%s", bad.status, bad.body)
	}
	if acct, _ := store.ConnectedAccount(ctx, tn.ID); acct != "" {
		t.Fatalf("a refused id was saved: %q", acct)
	}
	ok := e.raw(owner, base, url.Values{"_csrf": {owner.csrf}, "account_id": {" acct_1Acme "}})
	if ok.status != http.StatusSeeOther || ok.location != base+"?done=account-saved" {
		t.Fatalf("save: %d %q", ok.status, ok.location)
	}
	if acct, _ := store.ConnectedAccount(ctx, tn.ID); acct != "acct_1Acme" {
		t.Fatalf("saved %q", acct)
	}
	entries, _, err := e.db.ListAudit(ctx, tn.ID, tenants.AuditQuery{Page: tenants.Page{Limit: 1}})
	if err != nil || len(entries) != 1 || entries[0].Action != "stripe_account.update" || entries[0].Object != "acct_1Acme" {
		t.Fatalf("audit: %+v %v", entries, err)
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
	if !strings.Contains(pg.body, `value="acct_1Acme"`) || !strings.Contains(pg.body, ">mobile-app<") ||
		!strings.Contains(pg.body, "9.00 USD") || !strings.Contains(pg.body, "the platform (invoice it yourself)") {
		t.Fatalf("page after saving:\n%s", pg.body)
	}
	if removed := e.raw(owner, base, url.Values{"_csrf": {owner.csrf}, "account_id": {""}}); removed.location != base+"?done=account-removed" {
		t.Fatalf("remove: %d %q", removed.status, removed.location)
	}

	member := e.signUp("other", true)
	if _, err := e.db.Pool().Exec(ctx, `INSERT INTO memberships (tenant_id, user_id, role) VALUES ($1, $2, $3)`,
		tn.ID, member.id, tenants.RoleDeveloper); err != nil {
		t.Fatal(err)
	}
	if pg := e.get(member, base); pg.status != http.StatusForbidden {
		t.Fatalf("a developer opened the payments page: %d", pg.status)
	}
	if pg := e.raw(member, base, url.Values{"_csrf": {member.csrf}, "account_id": {"acct_2Evil"}}); pg.status == http.StatusSeeOther && strings.Contains(pg.location, "done=") {
		t.Fatalf("a developer saved an account: %d %q", pg.status, pg.location)
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
