package portal_test

import (
	"context"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/billing"
	billingpg "tollgate/billing/postgres"
	"tollgate/infra/usage"
	"tollgate/tenants"
	"tollgate/tenants/postgres/pgtest"
	"tollgate/tenants/smtp/smtptest"
	"tollgate/web/portal"
)

// TestPortalUsageFunctionTime: the consumer's usage page says how long the API's
// functions ran for its calls this month, and another consumer's time is not its own.
func TestPortalUsageFunctionTime(t *testing.T) {
	t.Parallel()
	db, _ := pgtest.Open(t)
	mail := smtptest.Start(t)
	app := fiber.New(fiber.Config{Immutable: true})
	store := billingpg.New(db.Pool())
	p := portal.New(portal.Config{Tenants: db, Consumers: db, Plans: db, Routes: db, Portals: db, Throttle: db, Usage: store,
		Mailer: mail.Mailer(t), PublicURL: "http://api.test", HostRefresh: time.Hour})
	p.Mount(app)
	e := &env{t: t, db: db, app: app, p: p, mail: mail}
	a := e.tenant("acme", true)
	c := e.client("api.test")
	c.signUp("acme", "dev@example.com")
	ctx := context.Background()
	acc, err := db.FindPortalAccountByEmail(ctx, a.ID, "dev@example.com")
	if err != nil {
		t.Fatal(err)
	}
	c.do("GET", "/portal/acme/usage", nil).want(t, 200, `data-testid="total">0<`)
	now := time.Now().UTC()
	rec := func(consumer string, n, us int64) usage.Record {
		return usage.Record{TenantID: a.ID, Hour: billing.Hour(now), RouteID: "r", ConsumerID: consumer, Class: 2,
			Counts: usage.Counts{Requests: n, Billable: n, FunctionUS: us}}
	}
	if _, err := store.Fold(ctx, &usage.Batch{ID: usage.BatchID("portal-test", "fn", 1), EdgeID: "portal-test", BootID: "fn", Seq: 1, Created: now,
		Records: []usage.Record{rec(acc.ConsumerID, 4, 12_345), rec("someone-else", 9, 999_999)}}); err != nil {
		t.Fatal(err)
	}
	c.do("GET", "/portal/acme/usage", nil).want(t, 200, `data-testid="total">4<`, `data-testid="function-ms">12.345<`)
}

// TestPortalQuotaCountsBillable: the quota card counts what the quota counts, the
// billable calls, not the gateway's refusals among all the requests.
func TestPortalQuotaCountsBillable(t *testing.T) {
	t.Parallel()
	db, _ := pgtest.Open(t)
	mail := smtptest.Start(t)
	app := fiber.New(fiber.Config{Immutable: true})
	store := billingpg.New(db.Pool())
	p := portal.New(portal.Config{Tenants: db, Consumers: db, Plans: db, Routes: db, Portals: db, Throttle: db, Usage: store,
		Mailer: mail.Mailer(t), PublicURL: "http://api.test", HostRefresh: time.Hour})
	p.Mount(app)
	e := &env{t: t, db: db, app: app, p: p, mail: mail}
	a := e.tenant("acme", true)
	c := e.client("api.test")
	c.signUp("acme", "dev@example.com")
	ctx := context.Background()
	acc, err := db.FindPortalAccountByEmail(ctx, a.ID, "dev@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.CreatePlan(ctx, &tenants.ConsumerPlan{TenantID: a.ID, Name: "metered", Quota: &tenants.Quota{Requests: 20}}); err != nil {
		t.Fatal(err)
	}
	cs, err := db.FindConsumer(ctx, a.ID, acc.ConsumerID)
	if err != nil {
		t.Fatal(err)
	}
	cs.Plan = "metered"
	if err := db.UpdateConsumer(ctx, cs); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if _, err := store.Fold(ctx, &usage.Batch{ID: usage.BatchID("portal-test", "q", 1), EdgeID: "portal-test", BootID: "q", Seq: 1, Created: now,
		Records: []usage.Record{
			{TenantID: a.ID, Hour: billing.Hour(now), RouteID: "r", ConsumerID: acc.ConsumerID, Class: 2, Counts: usage.Counts{Requests: 5, Billable: 5}},
			{TenantID: a.ID, Hour: billing.Hour(now), RouteID: "r", ConsumerID: acc.ConsumerID, Class: 4, Counts: usage.Counts{Requests: 7}},
		}}); err != nil {
		t.Fatal(err)
	}
	c.do("GET", "/portal/acme/usage", nil).want(t, 200, `data-testid="total">12<`, `data-testid="billable">5<`, "(25%)")
}
