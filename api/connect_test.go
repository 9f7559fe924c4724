package api_test

import (
	"context"
	"strings"
	"testing"

	"tollgate/api"
	billingpg "tollgate/billing/postgres"
	billingstripe "tollgate/billing/stripe"
	"tollgate/infra/testenv"
	"tollgate/tenants"
	"tollgate/tenants/postgres"
)

// connectEnv serves the Connect endpoints over stripe-mock.
func connectEnv(t *testing.T) (*env, *billingpg.Store) {
	t.Helper()
	var store *billingpg.Store
	e := newEnv(t, func(c *api.Config) {
		c.Audit = c.Tenants.(*postgres.DB)
		store = billingpg.New(c.Tenants.(*postgres.DB).Pool())
		ps, err := billingstripe.New(billingstripe.Config{Key: "sk_test_123", URL: testenv.StripeMock(t), Store: store})
		if err != nil {
			t.Fatal(err)
		}
		cn, err := billingstripe.NewConnect(ps, store)
		if err != nil {
			t.Fatal(err)
		}
		c.Connect = cn
		c.PublicURL = "https://console.tollgate.test"
	})
	return e, store
}

// No endpoint takes an account id; onboarding creates the account on Stripe and answers
// Stripe's URL; an account can be held by one tenant only.
func TestConnectedAccountAPI(t *testing.T) {
	e, store := connectEnv(t)
	acme := e.tenant("acme")
	ctx := context.Background()
	const base = "/v1/tenants/acme/stripe/account"

	if r := e.do("GET", base, adminToken, nil).want(200); r.str("status") != "none" {
		t.Fatalf("before: %s", r.body)
	}
	// The probe's request: the tenant names an account of its choosing.
	e.do("POST", base+"/onboarding", adminToken, map[string]any{"account_id": "acct_1Victim"}).wantErr(400, "invalid_request", "account_id")
	if r := e.do("PUT", base, adminToken, map[string]any{"account_id": "acct_1Victim"}); r.status < 400 || r.status >= 500 {
		t.Fatalf("PUT of an account id: %d %s", r.status, r.body)
	}
	if a, _ := store.ConnectStatus(ctx, acme); a.Status != "none" {
		t.Fatalf("a typed id was stored: %+v", a)
	}

	r := e.do("POST", base+"/onboarding", adminToken, map[string]any{}).want(200)
	acct, _ := r.json["account"].(map[string]any)
	if !strings.HasPrefix(r.str("url"), "https://") || acct["status"] != "onboarding" || !strings.HasPrefix(acct["account_id"].(string), "acct_") {
		t.Fatalf("onboarding: %s", r.body)
	}
	id := acct["account_id"].(string)
	if r := e.do("POST", base+"/refresh", adminToken, nil).want(200); r.str("status") != "onboarding" || r.str("account_id") != id {
		t.Fatalf("refresh (stripe-mock's account cannot take charges): %s", r.body)
	}
	if n := e.auditCount(acme, "stripe_account.create"); n != 1 {
		t.Fatalf("%d stripe_account.create entries", n)
	}

	// A second tenant can never hold acme's account, however the id reached it.
	other := e.tenant("other")
	if _, err := store.AttachConnectedAccount(ctx, other, id); tenants.ErrorCode(err) != tenants.EConflict {
		t.Fatalf("attach acme's account to another tenant: %v", err)
	}
	if r := e.do("GET", "/v1/tenants/other/stripe/account", adminToken, nil).want(200); r.str("status") != "none" {
		t.Fatalf("other tenant after the refusal: %s", r.body)
	}
	// Another tenant's token does not see acme's account.
	e.do("GET", base, e.token("other"), nil).wantErr(404, "not_found", "")

	e.do("DELETE", base, adminToken, nil).want(204)
	if r := e.do("GET", base, adminToken, nil).want(200); r.str("status") != "none" {
		t.Fatalf("after disconnect: %s", r.body)
	}
}

func (e *env) auditCount(tenantID, action string) int {
	e.t.Helper()
	var n int
	if err := e.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM audit_log WHERE tenant_id = $1 AND action = $2`,
		tenantID, action).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}
