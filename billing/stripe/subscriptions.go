package stripe

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	stripeapi "github.com/stripe/stripe-go/v76"

	"tollgate/billing"
	"tollgate/tenants"
)

// Paying tenants. A tenant whose platform plan has a price in effect this month that
// charges something (a monthly fee, a unit price or a function time price) is a Stripe
// customer with one subscription: a licensed item for the monthly fee, a metered item on
// the Billing Meter of billable requests the Pusher feeds, and one on its function
// time's meter. The Stripe product and prices of each price version are made
// once and remembered (stripe_prices); a new plan or price version swaps the
// subscription's items; a plan that charges nothing (or has no price) cancels it.
//
// Every create carries an Idempotency-Key derived from what it makes (the price version,
// the tenant and how many subscriptions it had), so a retry after a lost answer makes
// nothing twice.

// priceLookup is the one question the subscriber asks of billing.PriceService.
type priceLookup interface {
	PriceAt(ctx context.Context, tenantID, plan string, p billing.Period) (*billing.Price, error)
}

// subscriptionStore is what the subscriber needs of billing/postgres.Store.
type subscriptionStore interface {
	BilledTenants(ctx context.Context) ([]billing.BilledTenant, error)
	StripePrice(ctx context.Context, plan, from, fingerprint string) (*billing.StripePrice, error)
	SetStripePrice(ctx context.Context, p *billing.StripePrice) (*billing.StripePrice, error)
	SaveSubscription(ctx context.Context, sub *billing.Subscription) error
}

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// Pusher is the Stripe client and the customers' maker. Required.
	Pusher *Pusher
	// Store remembers prices and subscriptions. Required.
	Store subscriptionStore
	// Prices answers which price version is in effect. Required.
	Prices priceLookup
	// Meter is the Billing Meter's id (mtr_…). Default: the active meter of the
	// Pusher's event name, made if there is none.
	Meter string
	// DaysUntilDue is how long a tenant has to pay an invoice Stripe sends. Default: 30.
	DaysUntilDue int64
}

// Subscriber keeps paying tenants' subscriptions in line with their plans and prices.
type Subscriber struct {
	cfg   SubscriberConfig
	p     *Pusher
	log   *slog.Logger
	meter string // found or made once
}

// NewSubscriber returns a Subscriber.
func NewSubscriber(cfg SubscriberConfig) (*Subscriber, error) {
	if cfg.Pusher == nil || cfg.Store == nil || cfg.Prices == nil {
		return nil, errors.New("stripe: SubscriberConfig needs Pusher, Store and Prices")
	}
	if cfg.DaysUntilDue <= 0 {
		cfg.DaysUntilDue = 30
	}
	return &Subscriber{cfg: cfg, p: cfg.Pusher, log: cfg.Pusher.log, meter: cfg.Meter}, nil
}

// Sync brings every tenant's subscription in line with its plan's price this month and
// returns how many it created, changed or cancelled. A tenant that fails is logged and
// does not stop the others; the error is the first failure.
func (s *Subscriber) Sync(ctx context.Context) (int, error) {
	list, err := s.cfg.Store.BilledTenants(ctx)
	if err != nil {
		return 0, err
	}
	period := billing.PeriodOf(s.p.cfg.Now().UTC())
	n := 0
	var first error
	for _, t := range list {
		changed, err := s.syncTenant(ctx, t, period)
		if err != nil {
			if ctx.Err() != nil {
				return n, ctx.Err()
			}
			s.log.Warn("stripe: subscription sync failed", "tenant", t.Slug, "tenant_id", t.ID, "err", err)
			if first == nil {
				first = err
			}
			continue
		}
		if changed {
			n++
		}
	}
	return n, first
}

// Run syncs every interval until ctx ends.
func (s *Subscriber) Run(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = 10 * time.Minute
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if n, err := s.Sync(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("stripe: subscription sync", "err", err)
		} else if n > 0 {
			s.log.Info("stripe: subscriptions synced", "changed", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// live says whether a subscription still bills.
func live(sub *billing.Subscription) bool {
	return sub != nil && sub.Status != billing.Canceled && sub.Status != "incomplete_expired"
}

func (s *Subscriber) syncTenant(ctx context.Context, t billing.BilledTenant, period billing.Period) (bool, error) {
	var price *billing.Price
	if !t.Gone {
		p, err := s.cfg.Prices.PriceAt(ctx, "", t.Plan, period)
		if err != nil && tenants.ErrorCode(err) != tenants.ENotFound {
			return false, err
		}
		if p != nil && (p.MonthlyFee > 0 || p.UnitPrice > 0 || p.FunctionUnitPrice > 0) {
			price = p
		}
	}
	sub := t.Subscription
	switch {
	case price == nil && live(sub):
		return true, s.cancel(ctx, sub)
	case price == nil:
		return false, nil
	case !live(sub):
		return true, s.subscribe(ctx, t, price)
	case sub.Plan != t.Plan || sub.EffectiveFrom != price.EffectiveFrom || sub.Fingerprint != fingerprint(price):
		return true, s.change(ctx, sub, t.Plan, price)
	}
	return false, nil
}

// subscribe makes the tenant a customer and subscribes it to the price version.
func (s *Subscriber) subscribe(ctx context.Context, t billing.BilledTenant, price *billing.Price) error {
	cus, err := s.p.EnableTenant(ctx, t.ID, t.Slug, t.Name)
	if err != nil {
		return err
	}
	sp, err := s.ensurePrices(ctx, price)
	if err != nil {
		return err
	}
	gen := 1
	if t.Subscription != nil {
		gen = t.Subscription.Generation + 1
	}
	params := &stripeapi.SubscriptionParams{
		Customer: stripeapi.String(cus),
		// Tenants pay Stripe's emailed invoice: no card is needed to start.
		CollectionMethod: stripeapi.String(string(stripeapi.SubscriptionCollectionMethodSendInvoice)),
		DaysUntilDue:     stripeapi.Int64(s.cfg.DaysUntilDue),
	}
	for _, id := range priceIDs(sp) {
		params.Items = append(params.Items, &stripeapi.SubscriptionItemsParams{Price: stripeapi.String(id)})
	}
	params.Context = ctx
	params.AddMetadata("tollgate_tenant_id", t.ID)
	params.AddMetadata("tollgate_plan", t.Plan)
	params.AddMetadata("tollgate_effective_from", price.EffectiveFrom)
	params.SetIdempotencyKey(fmt.Sprintf("tollgate-subscription-%s-%d", t.ID, gen))
	created, err := s.p.api.Subscriptions.New(params)
	if err != nil {
		return fmt.Errorf("stripe: subscribe tenant %s: %w", t.Slug, err)
	}
	s.log.Info("stripe: tenant subscribed", "tenant", t.Slug, "subscription", created.ID, "plan", t.Plan, "from", price.EffectiveFrom)
	return s.cfg.Store.SaveSubscription(ctx, &billing.Subscription{
		TenantID: t.ID, CustomerID: cus, SubscriptionID: created.ID, Generation: gen, Plan: t.Plan,
		EffectiveFrom: price.EffectiveFrom, Fingerprint: sp.Fingerprint, Status: string(created.Status), CurrentPeriodEnd: unixTime(created.CurrentPeriodEnd),
	})
}

// change swaps the subscription's items for the new price version's: items whose price
// is not wanted are deleted, wanted prices not on it are added. It reads the items from
// Stripe rather than remembering them, so items changed in the dashboard are seen.
func (s *Subscriber) change(ctx context.Context, sub *billing.Subscription, plan string, price *billing.Price) error {
	sp, err := s.ensurePrices(ctx, price)
	if err != nil {
		return err
	}
	get := &stripeapi.SubscriptionParams{}
	get.Context = ctx
	cur, err := s.p.api.Subscriptions.Get(sub.SubscriptionID, get)
	if err != nil {
		return fmt.Errorf("stripe: read subscription %s: %w", sub.SubscriptionID, err)
	}
	next := *sub
	next.Plan, next.EffectiveFrom, next.Fingerprint = plan, price.EffectiveFrom, sp.Fingerprint
	items := itemChanges(cur, sp)
	if len(items) == 0 { // already so (a retry after a lost answer): only the record lags
		next.Status, next.CurrentPeriodEnd = string(cur.Status), unixTime(cur.CurrentPeriodEnd)
		return s.cfg.Store.SaveSubscription(ctx, &next)
	}
	params := &stripeapi.SubscriptionParams{Items: items}
	params.Context = ctx
	params.AddMetadata("tollgate_plan", plan)
	params.AddMetadata("tollgate_effective_from", price.EffectiveFrom)
	params.SetIdempotencyKey(changeKey(sub.SubscriptionID, items))
	updated, err := s.p.api.Subscriptions.Update(sub.SubscriptionID, params)
	if err != nil {
		return fmt.Errorf("stripe: change subscription %s: %w", sub.SubscriptionID, err)
	}
	s.log.Info("stripe: subscription changed", "subscription", sub.SubscriptionID, "plan", plan, "from", price.EffectiveFrom)
	next.Status, next.CurrentPeriodEnd = string(updated.Status), unixTime(updated.CurrentPeriodEnd)
	return s.cfg.Store.SaveSubscription(ctx, &next)
}

// changeKey is the Idempotency-Key of an item change: the items it deletes and the prices
// it adds. A retry sends the same; a later change (back to an earlier plan, say) deletes
// other items, since every change makes new ones, and so has a key of its own.
func changeKey(sub string, items []*stripeapi.SubscriptionItemsParams) string {
	h := sha256.New()
	for _, it := range items {
		fmt.Fprintf(h, "%s|%s\n", stripeapi.StringValue(it.ID), stripeapi.StringValue(it.Price))
	}
	return "tollgate-subscription-" + sub + "-" + hex.EncodeToString(h.Sum(nil))[:16]
}

// fingerprint sums up a price version's numbers: a version replaced while in effect
// (billing.PriceService allows it for this month) needs new Stripe prices. The function
// time's numbers count only when it is charged, so the versions that keep it free kept
// the fingerprint (and the Stripe prices) they had before it was charged.
func fingerprint(p *billing.Price) string {
	s := fmt.Appendf(nil, "%s|%d|%d|%d|%d|%t", strings.ToLower(p.Currency), p.MonthlyFee,
		p.IncludedRequests, p.UnitPrice, p.UnitRequests, p.PerConsumer)
	if p.FunctionUnitPrice > 0 {
		s = fmt.Appendf(s, "|fn|%d|%d|%d", p.IncludedFunctionMS, p.FunctionUnitPrice, p.FunctionUnitMS)
	}
	h := sha256.Sum256(s)
	return hex.EncodeToString(h[:])[:12]
}

// priceIDs are a price version's Stripe prices, in item order: fee, requests, function
// time.
func priceIDs(sp *billing.StripePrice) []string {
	var ids []string
	for _, id := range []string{sp.FeePriceID, sp.UsagePriceID, sp.FunctionPriceID} {
		if id != "" {
			ids = append(ids, id)
		}
	}
	return ids
}

// itemChanges turns the subscription's items into the price version's.
func itemChanges(cur *stripeapi.Subscription, sp *billing.StripePrice) []*stripeapi.SubscriptionItemsParams {
	want := map[string]bool{}
	for _, id := range priceIDs(sp) {
		want[id] = true
	}
	var items []*stripeapi.SubscriptionItemsParams
	if cur.Items != nil {
		for _, it := range cur.Items.Data {
			if it.Price != nil && want[it.Price.ID] {
				delete(want, it.Price.ID)
				continue
			}
			items = append(items, &stripeapi.SubscriptionItemsParams{ID: stripeapi.String(it.ID), Deleted: stripeapi.Bool(true)})
		}
	}
	for _, id := range priceIDs(sp) {
		if want[id] {
			items = append(items, &stripeapi.SubscriptionItemsParams{Price: stripeapi.String(id)})
		}
	}
	return items
}

// cancel ends the subscription now.
func (s *Subscriber) cancel(ctx context.Context, sub *billing.Subscription) error {
	params := &stripeapi.SubscriptionCancelParams{}
	params.Context = ctx
	params.SetIdempotencyKey("tollgate-subscription-cancel-" + sub.SubscriptionID)
	if _, err := s.p.api.Subscriptions.Cancel(sub.SubscriptionID, params); err != nil {
		var se *stripeapi.Error
		// Already gone in Stripe (deleted in the dashboard): record it as ended.
		if !errors.As(err, &se) || se.HTTPStatusCode != 404 {
			return fmt.Errorf("stripe: cancel subscription %s: %w", sub.SubscriptionID, err)
		}
	}
	s.log.Info("stripe: subscription cancelled", "subscription", sub.SubscriptionID, "tenant_id", sub.TenantID)
	next := *sub
	next.Status = billing.Canceled
	return s.cfg.Store.SaveSubscription(ctx, &next)
}

// ensurePrices returns the Stripe product and prices of a price version, making them the
// first time.
func (s *Subscriber) ensurePrices(ctx context.Context, price *billing.Price) (*billing.StripePrice, error) {
	fp := fingerprint(price)
	sp, err := s.cfg.Store.StripePrice(ctx, price.Plan, price.EffectiveFrom, fp)
	if err == nil {
		return sp, nil
	} else if tenants.ErrorCode(err) != tenants.ENotFound {
		return nil, err
	}
	if price.FunctionUnitPrice > 0 {
		// Refused before anything is made, so a price Stripe cannot express leaves no
		// product behind.
		if _, err := functionPrice("", price); err != nil {
			return nil, err
		}
	}
	key := "tollgate-" + price.Plan + "-" + price.EffectiveFrom + "-" + fp
	prod := &stripeapi.ProductParams{Name: stripeapi.String("Tollgate " + price.Plan + " plan (from " + price.EffectiveFrom + ")")}
	prod.Context = ctx
	prod.AddMetadata("tollgate_plan", price.Plan)
	prod.AddMetadata("tollgate_effective_from", price.EffectiveFrom)
	prod.SetIdempotencyKey(key + "-product")
	product, err := s.p.api.Products.New(prod)
	if err != nil {
		return nil, fmt.Errorf("stripe: create product for plan %s: %w", price.Plan, err)
	}
	sp = &billing.StripePrice{Plan: price.Plan, EffectiveFrom: price.EffectiveFrom, Fingerprint: fp, ProductID: product.ID}
	if price.MonthlyFee > 0 {
		if sp.FeePriceID, err = s.newPrice(ctx, key+"-fee", feePrice(product.ID, price)); err != nil {
			return nil, err
		}
	}
	if price.UnitPrice > 0 {
		meter, err := s.ensureMeter(ctx)
		if err != nil {
			return nil, err
		}
		if sp.UsagePriceID, err = s.newPrice(ctx, key+"-usage", usagePrice(product.ID, meter, price)); err != nil {
			return nil, err
		}
	}
	if price.FunctionUnitPrice > 0 {
		params, err := functionPrice(product.ID, price)
		if err != nil {
			return nil, err
		}
		meter, err := s.p.functionMeter(ctx)
		if err != nil {
			return nil, err
		}
		params.Recurring.Meter = stripeapi.String(meter)
		if sp.FunctionPriceID, err = s.newPrice(ctx, key+"-function", params); err != nil {
			return nil, err
		}
	}
	return s.cfg.Store.SetStripePrice(ctx, sp)
}

func (s *Subscriber) newPrice(ctx context.Context, key string, params *stripeapi.PriceParams) (string, error) {
	params.Context = ctx
	params.SetIdempotencyKey(key)
	pr, err := s.p.api.Prices.New(params)
	if err != nil {
		return "", fmt.Errorf("stripe: create price %s: %w", key, err)
	}
	return pr.ID, nil
}

// feePrice is the monthly fee: licensed, one per subscription.
func feePrice(product string, p *billing.Price) *stripeapi.PriceParams {
	return &stripeapi.PriceParams{
		Product:    stripeapi.String(product),
		Currency:   stripeapi.String(p.Currency),
		UnitAmount: stripeapi.Int64(p.MonthlyFee),
		Recurring: &stripeapi.PriceRecurringParams{
			Interval:  stripeapi.String(string(stripeapi.PriceRecurringIntervalMonth)),
			UsageType: stripeapi.String(string(stripeapi.PriceRecurringUsageTypeLicensed)),
		},
	}
}

// usagePrice charges the meter's billable requests at UnitPrice per UnitRequests, the
// first IncludedRequests of the month free (a graduated tier). Stripe rounds the sum of
// fractional cents; the export's ceiling per line stays the reference.
func usagePrice(product, meter string, p *billing.Price) *stripeapi.PriceParams {
	unit := p.UnitRequests
	if unit <= 0 {
		unit = 1
	}
	perRequest := float64(p.UnitPrice) / float64(unit)
	params := &stripeapi.PriceParams{
		Product:  stripeapi.String(product),
		Currency: stripeapi.String(p.Currency),
		Recurring: &stripeapi.PriceRecurringParams{
			Interval:  stripeapi.String(string(stripeapi.PriceRecurringIntervalMonth)),
			UsageType: stripeapi.String(string(stripeapi.PriceRecurringUsageTypeMetered)),
			Meter:     stripeapi.String(meter),
		},
	}
	if p.IncludedRequests <= 0 {
		params.UnitAmountDecimal = stripeapi.Float64(perRequest)
		return params
	}
	params.BillingScheme = stripeapi.String(string(stripeapi.PriceBillingSchemeTiered))
	params.TiersMode = stripeapi.String(string(stripeapi.PriceTiersModeGraduated))
	params.Tiers = []*stripeapi.PriceTierParams{
		{UpTo: stripeapi.Int64(p.IncludedRequests), UnitAmount: stripeapi.Int64(0)},
		{UpToInf: stripeapi.Bool(true), UnitAmountDecimal: stripeapi.Float64(perRequest)},
	}
	return params
}

// functionPrice charges the function time's meter (µs) at FunctionUnitPrice per
// FunctionUnitMS, the first IncludedFunctionMS of the month free (a graduated tier), like
// usagePrice; Recurring.Meter is for the caller to set. Stripe takes at most 12 decimal
// places of a minor unit per µs: the amount is rounded to them, and a price so fine that
// it rounds to nothing is refused rather than charged as free.
func functionPrice(product string, p *billing.Price) (*stripeapi.PriceParams, error) {
	unitMS := p.FunctionUnitMS
	if unitMS <= 0 {
		unitMS = 1000
	}
	perUS := math.Round(float64(p.FunctionUnitPrice)/(float64(unitMS)*1000)*1e12) / 1e12
	if perUS <= 0 {
		return nil, tenants.Errorf(tenants.EInvalidRequest,
			"stripe: plan %s from %s: %d per %d ms of function time is below Stripe's smallest amount per µs (1e-12 of a minor unit)",
			p.Plan, p.EffectiveFrom, p.FunctionUnitPrice, unitMS)
	}
	params := &stripeapi.PriceParams{
		Product:  stripeapi.String(product),
		Currency: stripeapi.String(p.Currency),
		Recurring: &stripeapi.PriceRecurringParams{
			Interval:  stripeapi.String(string(stripeapi.PriceRecurringIntervalMonth)),
			UsageType: stripeapi.String(string(stripeapi.PriceRecurringUsageTypeMetered)),
		},
	}
	params.AddMetadata("tollgate_unit", "function_us")
	if p.IncludedFunctionMS <= 0 {
		params.UnitAmountDecimal = stripeapi.Float64(perUS)
		return params, nil
	}
	params.BillingScheme = stripeapi.String(string(stripeapi.PriceBillingSchemeTiered))
	params.TiersMode = stripeapi.String(string(stripeapi.PriceTiersModeGraduated))
	params.Tiers = []*stripeapi.PriceTierParams{
		{UpTo: stripeapi.Int64(p.IncludedFunctionMS * 1000), UnitAmount: stripeapi.Int64(0)},
		{UpToInf: stripeapi.Bool(true), UnitAmountDecimal: stripeapi.Float64(perUS)},
	}
	return params, nil
}

// ensureMeter returns the Billing Meter's id: the configured one, else the active meter
// of the event name, else a new one.
func (s *Subscriber) ensureMeter(ctx context.Context) (string, error) {
	if s.meter != "" {
		return s.meter, nil
	}
	id, err := s.p.meter(ctx, s.p.cfg.EventName, "Tollgate billable requests")
	if err != nil {
		return "", err
	}
	s.meter = id
	return id, nil
}

// unixTime is a Stripe timestamp as a time; nil for 0 (not set).
func unixTime(sec int64) *time.Time {
	if sec == 0 {
		return nil
	}
	t := time.Unix(sec, 0).UTC()
	return &t
}
