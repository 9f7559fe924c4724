package stripe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"tollgate/billing"
	"tollgate/billing/billingtest"
	billingstripe "tollgate/billing/stripe"
	"tollgate/tenants"
)

// onboardedStripe sits in front of the recording proxy and, once finished is set, answers
// an account retrieve as Stripe does after the tenant completed onboarding (stripe-mock
// keeps no state, so its account never gets there by itself).
func onboardedStripe(t *testing.T, p *stripeProxy, finished *atomic.Bool) string {
	target, _ := url.Parse(p.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(res *http.Response) error {
		if res.Request.Method != http.MethodGet || !strings.HasPrefix(res.Request.URL.Path, "/v1/accounts/") || !finished.Load() {
			return nil
		}
		body, err := io.ReadAll(res.Body)
		if err != nil {
			return err
		}
		var obj map[string]any
		if json.Unmarshal(body, &obj) == nil {
			obj["charges_enabled"], obj["details_submitted"] = true, true
			body, _ = json.Marshal(obj)
		}
		res.Body = io.NopCloser(bytes.NewReader(body))
		res.ContentLength = int64(len(body))
		res.Header.Set("Content-Length", strconv.Itoa(len(body)))
		return nil
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return srv.URL
}

func newConnect(t *testing.T, db *billingtest.DB, stripeURL string) (*billingstripe.Connect, *billingstripe.Checkout) {
	t.Helper()
	ps, err := billingstripe.New(billingstripe.Config{Key: "sk_test_123", URL: stripeURL, Store: db.Store, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	cn, err := billingstripe.NewConnect(ps, db.Store)
	if err != nil {
		t.Fatal(err)
	}
	co, err := billingstripe.NewCheckout(ps, db.Store)
	if err != nil {
		t.Fatal(err)
	}
	return cn, co
}

func checkoutOf(tn *tenants.Tenant) billing.CheckoutRequest {
	return billing.CheckoutRequest{TenantID: tn.ID, ConsumerID: "c-1", Plan: "gold",
		Price:      billing.Price{TenantID: tn.ID, Plan: "gold", EffectiveFrom: thisMonth(), Currency: "usd", MonthlyFee: 900},
		SuccessURL: "https://portal.example/ok", CancelURL: "https://portal.example/plans"}
}

// Onboarding creates the account on Stripe (the tenant never names it) and answers
// Stripe's onboarding URL; consumers' checkouts are refused until Stripe says the account
// takes charges, then made on it.
func TestConnectOnboarding(t *testing.T) {
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	proxy := newProxy(t)
	var finished atomic.Bool
	cn, co := newConnect(t, db, onboardedStripe(t, proxy, &finished))
	ctx := context.Background()

	if a, err := cn.ConnectedAccount(ctx, tn.ID); err != nil || a.Status != billing.ConnectNone {
		t.Fatalf("before: %+v %v", a, err)
	}
	if _, err := cn.RefreshAccount(ctx, tn.ID); tenants.ErrorCode(err) != tenants.ENotFound {
		t.Fatalf("refresh without an account: %v", err)
	}
	ob, err := cn.StartOnboarding(ctx, tn.ID, "https://console.example/refresh", "https://console.example/return")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ob.URL, "https://") || ob.Account.Status != billing.ConnectOnboarding || !strings.HasPrefix(ob.Account.AccountID, "acct_") {
		t.Fatalf("onboarding %+v %+v", ob, ob.Account)
	}
	creates := proxy.find("POST", "/v1/accounts")
	if len(creates) != 1 || creates[0].form.Get("type") != "express" || creates[0].form.Get("metadata[tollgate_tenant_id]") != tn.ID ||
		creates[0].idempotent == "" {
		t.Fatalf("account creates %+v", creates)
	}
	links := proxy.find("POST", "/v1/account_links")
	if len(links) != 1 || links[0].form.Get("account") != ob.Account.AccountID || links[0].form.Get("type") != "account_onboarding" ||
		links[0].form.Get("return_url") != "https://console.example/return" || links[0].form.Get("refresh_url") != "https://console.example/refresh" {
		t.Fatalf("account links %+v", links)
	}
	// A second start (the link expired) links the same account, never a new one.
	again, err := cn.StartOnboarding(ctx, tn.ID, "https://console.example/refresh", "https://console.example/return")
	if err != nil || again.Account.AccountID != ob.Account.AccountID || len(proxy.find("POST", "/v1/accounts")) != 1 {
		t.Fatalf("second start: %+v %v", again, err)
	}

	// Back from Stripe with onboarding unfinished: still no checkout, on any account.
	if a, err := cn.RefreshAccount(ctx, tn.ID); err != nil || a.Status != billing.ConnectOnboarding || a.CheckedAt == nil {
		t.Fatalf("refresh before onboarding finished: %+v %v", a, err)
	}
	if _, err := co.StartCheckout(ctx, checkoutOf(tn)); tenants.ErrorCode(err) != tenants.EConflict {
		t.Fatalf("checkout on an account that cannot take charges: %v", err)
	}
	if n := len(proxy.find("POST", "/v1/checkout/sessions")); n != 0 {
		t.Fatalf("%d sessions made on an unready account", n)
	}

	finished.Store(true)
	a, err := cn.RefreshAccount(ctx, tn.ID)
	if err != nil || a.Status != billing.ConnectReady || !a.ChargesEnabled || !a.DetailsSubmitted || a.AccountID != ob.Account.AccountID {
		t.Fatalf("refresh after onboarding: %+v %v", a, err)
	}
	if _, err := co.StartCheckout(ctx, checkoutOf(tn)); err != nil {
		t.Fatal(err)
	}
	sessions := proxy.find("POST", "/v1/checkout/sessions")
	if len(sessions) != 1 || sessions[0].account != ob.Account.AccountID {
		t.Fatalf("sessions %+v", sessions)
	}

	// Disconnected: consumers pay the platform again.
	if err := cn.Disconnect(ctx, tn.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := co.StartCheckout(ctx, checkoutOf(tn)); err != nil {
		t.Fatal(err)
	}
	if s := proxy.find("POST", "/v1/checkout/sessions"); len(s) != 2 || s[1].account != "" {
		t.Fatalf("session after disconnect %+v", s)
	}
}

// An id a tenant typed in before onboarding existed (as 00016 stored it) is never used:
// Checkout refuses rather than run on it or silently on the platform, until the tenant
// connects through Stripe (which drops the typed id) or removes it.
func TestConnectTypedAccountIsNotUsed(t *testing.T) {
	db := billingtest.Open(t)
	tn := db.Tenant(t, "acme", "pro")
	victim := db.Tenant(t, "victim", "pro")
	proxy := newProxy(t)
	var finished atomic.Bool
	cn, co := newConnect(t, db, onboardedStripe(t, proxy, &finished))
	ctx := context.Background()

	// The victim's proven account, and the attacker's typed-in copy of its id.
	ob, err := cn.StartOnboarding(ctx, victim.ID, "https://c/r", "https://c/b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Tenants.Pool().Exec(ctx, `INSERT INTO stripe_accounts (tenant_id, account_id) VALUES ($1, $2)`, tn.ID, ob.Account.AccountID); err != nil {
		t.Fatal(err)
	}
	a, err := cn.ConnectedAccount(ctx, tn.ID)
	if err != nil || a.Status != billing.ConnectUnproven || a.UnprovenAccountID != ob.Account.AccountID || a.AccountID != "" {
		t.Fatalf("typed account: %+v %v", a, err)
	}
	if _, err := co.StartCheckout(ctx, checkoutOf(tn)); tenants.ErrorCode(err) != tenants.EConflict {
		t.Fatalf("checkout on a typed-in account: %v", err)
	}
	if n := len(proxy.find("POST", "/v1/checkout/sessions")); n != 0 {
		t.Fatalf("%d sessions made", n)
	}

	// A second tenant can never hold the victim's account, even if Stripe answered it.
	if _, err := db.Store.AttachConnectedAccount(ctx, tn.ID, ob.Account.AccountID); tenants.ErrorCode(err) != tenants.EConflict {
		t.Fatalf("attach another tenant's account: %v", err)
	}

	// Connecting through Stripe replaces the typed id with an account of its own.
	own, err := cn.StartOnboarding(ctx, tn.ID, "https://c/r", "https://c/b")
	if err != nil || own.Account.AccountID == ob.Account.AccountID || own.Account.UnprovenAccountID != "" {
		t.Fatalf("own onboarding: %+v %v", own, err)
	}
	var typed int
	if err := db.Tenants.Pool().QueryRow(ctx, `SELECT count(*) FROM stripe_accounts WHERE tenant_id = $1`, tn.ID).Scan(&typed); err != nil || typed != 0 {
		t.Fatalf("typed id kept: %d %v", typed, err)
	}
}
