// Package stripe pushes billable usage to Stripe (stripe-go v76): a tenant billed
// through Stripe maps to a Stripe customer, created when billing is enabled for it; each
// settled hour of its billable requests becomes one Billing Meter event, and each settled
// hour with function time one more, under a second event name, in µs.
//
// Exactly once, both meters alike: a push is first recorded in stripe_pushes
// (billing/postgres) with an identifier derived from (meter, tenant, hour, revision),
// then sent with that identifier as both the meter event's identifier and the request's
// Idempotency-Key. A retry — after a timeout, a 5xx, or a crash between Stripe's answer
// and our record of it — resends the same identifier, which Stripe counts once; a push
// recorded as pushed is never sent again. Usage that folds into an hour after it was
// pushed (a late batch) goes out as a new revision of its meter carrying only the
// difference. Function time is pushed in µs, as folded, so no event rounds.
//
// Failed attempts back off exponentially (Config.Backoff doubling up to Config.MaxBackoff).
// Stripe's 4xx answers other than 401, 403, 409 and 429 are permanent (the push is
// marked failed and shows in reconciliation); everything else is retried.
package stripe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	stripeapi "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"tollgate/billing"
	"tollgate/tenants"
)

// DefaultEventName is the meter event name of billable requests; the Stripe meter must
// use the same.
const DefaultEventName = "tollgate_requests"

// DefaultFunctionEventName is the meter event name of function time. Its values are
// microseconds, the unit the edges meter and billing folds, so an hour's events sum to
// its rollup exactly; a meter in milliseconds would round each hour.
const DefaultFunctionEventName = "tollgate_function_us"

// store is what the pusher needs of billing/postgres.Store.
type store interface {
	Customer(ctx context.Context, tenantID string) (string, error)
	SetCustomer(ctx context.Context, tenantID, customerID string) (string, error)
	PlanPushes(ctx context.Context, since, settledBefore, now time.Time) (int, error)
	DuePushes(ctx context.Context, now time.Time, limit int) ([]billing.Push, error)
	PushSucceeded(ctx context.Context, identifier string, at time.Time) error
	PushFailed(ctx context.Context, identifier, msg string, next time.Time, permanent bool) error
}

// Config configures a Pusher. Zero fields take the default in their comment.
type Config struct {
	// Key is the Stripe secret key. Required.
	Key string
	// URL is the API base URL. Default: Stripe's. Tests point it at stripe-mock.
	URL string
	// EventName of the billable requests' meter events. Default: DefaultEventName.
	EventName string
	// FunctionEventName of the function time's meter events (values in µs). Default:
	// DefaultFunctionEventName.
	FunctionEventName string
	// Store records customers and pushes. Required.
	Store store
	// HTTPClient. Default: a client with a 30s timeout.
	HTTPClient *http.Client
	// Settle is how long after an hour ends it is pushed. Default: billing.DefaultSettle.
	Settle time.Duration
	// Lookback is how far back hours are still pushed (Stripe takes events up to 35 days
	// old). Default: 30 days.
	Lookback time.Duration
	// Backoff is the delay after a first failure, doubling per attempt up to MaxBackoff.
	// Defaults: 30s, 1h.
	Backoff, MaxBackoff time.Duration
	// Now is the clock. Default: time.Now.
	Now func() time.Time
	// Logger. Default: slog.Default().
	Logger *slog.Logger
	// Metrics, when set, counts pushes and failures.
	Metrics *billing.Metrics
}

// Pusher creates customers and pushes usage.
type Pusher struct {
	cfg Config
	api *client.API
	log *slog.Logger

	// fnMeter is the function time's meter, found or made before its first push: Stripe
	// takes an event whose name no meter has and drops it later, so pushing first would
	// record as pushed what Stripe never counts.
	fnMeterMu sync.Mutex
	fnMeter   string
}

// New returns a Pusher.
func New(cfg Config) (*Pusher, error) {
	if cfg.Key == "" || cfg.Store == nil {
		return nil, errors.New("stripe: Config needs Key and Store")
	}
	if cfg.EventName == "" {
		cfg.EventName = DefaultEventName
	}
	if cfg.FunctionEventName == "" {
		cfg.FunctionEventName = DefaultFunctionEventName
	}
	if cfg.FunctionEventName == cfg.EventName {
		// One meter would sum requests and microseconds into one number.
		return nil, fmt.Errorf("stripe: the function time's event name %q is the requests'", cfg.EventName)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if cfg.Settle <= 0 {
		cfg.Settle = billing.DefaultSettle
	}
	if cfg.Lookback <= 0 {
		cfg.Lookback = 30 * 24 * time.Hour
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 30 * time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	bc := &stripeapi.BackendConfig{
		HTTPClient: cfg.HTTPClient,
		// Retries are ours (recorded, backed off, same identifier); the library's would
		// be invisible to the record.
		MaxNetworkRetries: stripeapi.Int64(0),
		LeveledLogger:     &stripeapi.LeveledLogger{Level: stripeapi.LevelNull},
	}
	if cfg.URL != "" {
		bc.URL = stripeapi.String(cfg.URL)
	}
	api := &client.API{}
	api.Init(cfg.Key, &stripeapi.Backends{
		API:     stripeapi.GetBackendWithConfig(stripeapi.APIBackend, bc),
		Connect: stripeapi.GetBackendWithConfig(stripeapi.ConnectBackend, bc),
		Uploads: stripeapi.GetBackendWithConfig(stripeapi.UploadsBackend, bc),
	})
	return &Pusher{cfg: cfg, api: api, log: cfg.Logger.With("component", "stripe")}, nil
}

// EnableTenant makes the tenant a Stripe customer unless it is one, and returns its
// customer id. The create request's Idempotency-Key is derived from the tenant id, so a
// retry after a lost answer does not make a second customer.
func (p *Pusher) EnableTenant(ctx context.Context, tenantID, slug, name string) (string, error) {
	if id, err := p.cfg.Store.Customer(ctx, tenantID); err == nil {
		return id, nil
	} else if tenants.ErrorCode(err) != tenants.ENotFound {
		return "", err
	}
	params := &stripeapi.CustomerParams{
		Name:        stripeapi.String(name),
		Description: stripeapi.String("Tollgate tenant " + slug),
	}
	params.Context = ctx
	params.AddMetadata("tollgate_tenant_id", tenantID)
	params.AddMetadata("tollgate_tenant_slug", slug)
	params.SetIdempotencyKey("tollgate-customer-" + tenantID)
	c, err := p.api.Customers.New(params)
	if err != nil {
		return "", fmt.Errorf("stripe: create customer for tenant %s: %w", slug, err)
	}
	return p.cfg.Store.SetCustomer(ctx, tenantID, c.ID)
}

// PushDue plans the pushes of settled hours and sends every due one, returning how many
// Stripe accepted. A failed push is recorded with its next attempt and does not stop the
// others; the error is the first store error, if any.
func (p *Pusher) PushDue(ctx context.Context) (int, error) {
	now := p.cfg.Now().UTC()
	if _, err := p.cfg.Store.PlanPushes(ctx, billing.Hour(now.Add(-p.cfg.Lookback)), now.Add(-p.cfg.Settle), now); err != nil {
		return 0, err
	}
	pushed := 0
	for {
		due, err := p.cfg.Store.DuePushes(ctx, now, 100)
		if err != nil {
			return pushed, err
		}
		if len(due) == 0 {
			return pushed, nil
		}
		for _, push := range due {
			ok, err := p.push(ctx, push, now)
			if err != nil {
				return pushed, err
			}
			if ok {
				pushed++
			}
		}
		if len(due) < 100 {
			return pushed, nil
		}
	}
}

// eventName is the meter event name of a push's meter.
func (p *Pusher) eventName(meter string) string {
	if meter == billing.MeterFunctionUS {
		return p.cfg.FunctionEventName
	}
	return p.cfg.EventName
}

// meter returns the id of the active Billing Meter of an event name, made (sum of
// `value`, customer from `stripe_customer_id`) when there is none. The create's
// Idempotency-Key is derived from the event name, so a retry makes one meter.
func (p *Pusher) meter(ctx context.Context, eventName, displayName string) (string, error) {
	list := &stripeapi.BillingMeterListParams{Status: stripeapi.String("active")}
	list.Context = ctx
	it := p.api.BillingMeters.List(list)
	for it.Next() {
		if m := it.BillingMeter(); m.EventName == eventName {
			return m.ID, nil
		}
	}
	if err := it.Err(); err != nil {
		return "", fmt.Errorf("stripe: list meters: %w", err)
	}
	params := &stripeapi.BillingMeterParams{
		DisplayName:        stripeapi.String(displayName),
		EventName:          stripeapi.String(eventName),
		DefaultAggregation: &stripeapi.BillingMeterDefaultAggregationParams{Formula: stripeapi.String("sum")},
		CustomerMapping: &stripeapi.BillingMeterCustomerMappingParams{
			EventPayloadKey: stripeapi.String("stripe_customer_id"), Type: stripeapi.String("by_id"),
		},
		ValueSettings: &stripeapi.BillingMeterValueSettingsParams{EventPayloadKey: stripeapi.String("value")},
	}
	params.Context = ctx
	params.SetIdempotencyKey("tollgate-meter-" + eventName)
	m, err := p.api.BillingMeters.New(params)
	if err != nil {
		return "", fmt.Errorf("stripe: create meter %s: %w", eventName, err)
	}
	p.log.Info("stripe: billing meter created", "meter", m.ID, "event_name", eventName)
	return m.ID, nil
}

// functionMeter returns the function time's meter, found or made once per Pusher.
func (p *Pusher) functionMeter(ctx context.Context) (string, error) {
	p.fnMeterMu.Lock()
	defer p.fnMeterMu.Unlock()
	if p.fnMeter != "" {
		return p.fnMeter, nil
	}
	id, err := p.meter(ctx, p.cfg.FunctionEventName, "Tollgate function time (µs)")
	if err != nil {
		return "", err
	}
	p.fnMeter = id
	return id, nil
}

// push sends one meter event and records the outcome. ok is whether Stripe accepted it;
// err is a failure to record.
func (p *Pusher) push(ctx context.Context, push billing.Push, now time.Time) (ok bool, err error) {
	if push.Meter == billing.MeterFunctionUS {
		if _, serr := p.functionMeter(ctx); serr != nil {
			return false, p.failed(ctx, push, now, serr, false)
		}
	}
	params := &stripeapi.BillingMeterEventParams{
		EventName:  stripeapi.String(p.eventName(push.Meter)),
		Identifier: stripeapi.String(push.Identifier),
		Timestamp:  stripeapi.Int64(push.Hour.Unix()),
		Payload: map[string]string{
			"stripe_customer_id": push.CustomerID,
			"value":              strconv.FormatInt(push.Quantity, 10),
		},
	}
	params.Context = ctx
	params.SetIdempotencyKey(push.Identifier)
	_, serr := p.api.BillingMeterEvents.New(params)
	if serr == nil {
		p.cfg.Metrics.Pushed(p.cfg.Now())
		if err := p.cfg.Store.PushSucceeded(ctx, push.Identifier, p.cfg.Now().UTC()); err != nil {
			// Stripe has it; the next run resends the same identifier, which Stripe
			// counts once.
			return true, fmt.Errorf("stripe: record push %s: %w", push.Identifier, err)
		}
		return true, nil
	}
	return false, p.failed(ctx, push, now, serr, isPermanent(serr))
}

// failed records a failed attempt: the push is retried after a backoff, or given up on
// when permanent. The error is a failure to record (or ctx's).
func (p *Pusher) failed(ctx context.Context, push billing.Push, now time.Time, serr error, permanent bool) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	p.cfg.Metrics.PushFailed(permanent)
	delay := p.cfg.Backoff << min(push.Attempts, 16)
	if delay <= 0 || delay > p.cfg.MaxBackoff {
		delay = p.cfg.MaxBackoff
	}
	p.log.Warn("stripe: meter event push failed", "identifier", push.Identifier, "meter", push.Meter, "attempt", push.Attempts+1,
		"permanent", permanent, "retry_in", delay, "err", serr)
	if err := p.cfg.Store.PushFailed(ctx, push.Identifier, serr.Error(), now.Add(delay), permanent); err != nil {
		return fmt.Errorf("stripe: record failed push %s: %w", push.Identifier, err)
	}
	return nil
}

// isPermanent says whether retrying cannot help: a 4xx other than auth, conflict and
// rate limiting.
func isPermanent(err error) bool {
	var se *stripeapi.Error
	if !errors.As(err, &se) {
		return false
	}
	switch s := se.HTTPStatusCode; {
	case s == http.StatusUnauthorized, s == http.StatusForbidden, s == http.StatusConflict, s == http.StatusTooManyRequests:
		return false
	case s >= 400 && s < 500:
		return true
	}
	return false
}

// Run pushes every interval until ctx ends.
func (p *Pusher) Run(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = time.Minute
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if n, err := p.PushDue(ctx); err != nil && ctx.Err() == nil {
			p.log.Error("stripe: push run", "err", err)
		} else if n > 0 {
			p.log.Info("stripe: usage pushed", "events", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
