package stripe

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	stripeapi "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"

	"tollgate/billing"
	"tollgate/tenants"
)

// Stripe's webhooks, served by the api at POST /v1/stripe/webhook without a token: the
// Stripe-Signature header (HMAC with the endpoint's whsec_ secret, at most
// WebhookTolerance old) is the credential. Each event is applied once: its id is recorded
// in the transaction that applies it, and a redelivery answers 200 and changes nothing.
//
//   - invoice.*: the invoice's status and amounts, by customer → tenant (a connected
//     account's invoices are the tenant's business: recorded only);
//   - customer.subscription.*: the subscription's status and period end (deleted:
//     canceled);
//   - checkout.session.completed: the consumer's checkout is paid and the consumer is
//     put on the plan it bought, through tenants.ConsumerService (audited as "stripe"),
//     so the edges get the change through the outbox;
//   - anything else: recorded, nothing changes.

// WebhookTolerance is how old a signature may be: older ones are replays.
const WebhookTolerance = 5 * time.Minute

// WebhookBodyLimit caps an event's body; Stripe's are a few KiB.
const WebhookBodyLimit = 1 << 20

// AuditActor names Stripe in the audit log of the changes its webhooks make.
const AuditActor = "stripe"

// webhookStore is what the webhook needs of billing/postgres.Store.
type webhookStore interface {
	EventSeen(ctx context.Context, id string) (bool, error)
	RecordEvent(ctx context.Context, id, typ, account string) (bool, error)
	ApplyInvoice(ctx context.Context, id, typ, account string, inv *billing.Invoice) (bool, error)
	ApplySubscription(ctx context.Context, id, typ, account, subscriptionID, status string, periodEnd *time.Time) (bool, error)
	ApplyCheckout(ctx context.Context, id, typ, account, sessionID, subscriptionID string, at time.Time) (*billing.CheckoutSession, bool, error)
	CheckoutSession(ctx context.Context, sessionID string) (*billing.CheckoutSession, error)
}

// consumerPlans is what the webhook needs of tenants.ConsumerService.
type consumerPlans interface {
	FindConsumer(ctx context.Context, tenantID, id string) (*tenants.Consumer, error)
	UpdateConsumer(ctx context.Context, c *tenants.Consumer) error
}

// WebhookConfig configures a Webhook.
type WebhookConfig struct {
	// Secret is the endpoint's signing secret (whsec_…). Required.
	Secret string
	// Store records events and applies them. Required.
	Store webhookStore
	// Consumers changes a consumer's plan when its checkout completes. Required.
	Consumers consumerPlans
	// Logger. Default: slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default: time.Now.
	Now func() time.Time
}

// Webhook receives Stripe's events.
type Webhook struct {
	cfg WebhookConfig
	log *slog.Logger
}

// NewWebhook returns a Webhook.
func NewWebhook(cfg WebhookConfig) (*Webhook, error) {
	if cfg.Secret == "" || cfg.Store == nil || cfg.Consumers == nil {
		return nil, errors.New("stripe: WebhookConfig needs Secret, Store and Consumers")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Webhook{cfg: cfg, log: cfg.Logger.With("component", "stripe_webhook")}, nil
}

// Handle is the Fiber handler of POST /v1/stripe/webhook. Errors are *tenants.Error for
// the api's envelope: 400 invalid_signature, 400 invalid_request (not an event), 413.
func (w *Webhook) Handle(c *fiber.Ctx) error {
	body := c.Body()
	if len(body) > WebhookBodyLimit {
		return tenants.Errorf(tenants.EBodyTooLarge, "request body is over the limit of %d bytes", WebhookBodyLimit)
	}
	ev, err := webhook.ConstructEventWithOptions(body, c.Get("Stripe-Signature"), w.cfg.Secret, webhook.ConstructEventOptions{
		Tolerance: WebhookTolerance,
		// Only a few stable fields are read; an endpoint pinned to another API version
		// still carries them.
		IgnoreAPIVersionMismatch: true,
	})
	if err != nil {
		return eventError(err)
	}
	if ev.ID == "" || ev.Data == nil {
		return tenants.Errorf(tenants.EInvalidRequest, "not a Stripe event")
	}
	applied, err := w.apply(c.UserContext(), &ev)
	if err != nil {
		return err
	}
	if !applied {
		w.log.Info("stripe: duplicate event ignored", "event", ev.ID, "type", ev.Type)
	}
	return c.JSON(billing.WebhookResult{Received: true, Duplicate: !applied})
}

// eventError tells a bad signature from a body that is not an event.
func eventError(err error) error {
	switch {
	case errors.Is(err, webhook.ErrNotSigned), errors.Is(err, webhook.ErrInvalidHeader),
		errors.Is(err, webhook.ErrNoValidSignature), errors.Is(err, webhook.ErrTooOld):
		return tenants.Errorf(tenants.EInvalidSignature, "the Stripe-Signature header does not sign this body with the endpoint's secret (or is over %s old)", WebhookTolerance)
	}
	return tenants.Errorf(tenants.EInvalidRequest, "not a Stripe event: %s", err)
}

// apply applies the event once; applied is false for a duplicate.
func (w *Webhook) apply(ctx context.Context, ev *stripeapi.Event) (bool, error) {
	id, typ, acct := ev.ID, string(ev.Type), ev.Account
	switch {
	case strings.HasPrefix(typ, "invoice.") && acct != "":
		// A connected account's invoice is between the tenant and its consumer.
		return w.cfg.Store.RecordEvent(ctx, id, typ, acct)
	case strings.HasPrefix(typ, "invoice."):
		var in stripeapi.Invoice
		if err := json.Unmarshal(ev.Data.Raw, &in); err != nil {
			return false, badObject(typ, err)
		}
		return w.cfg.Store.ApplyInvoice(ctx, id, typ, acct, invoiceOf(&in))
	case strings.HasPrefix(typ, "customer.subscription."):
		var sub stripeapi.Subscription
		if err := json.Unmarshal(ev.Data.Raw, &sub); err != nil {
			return false, badObject(typ, err)
		}
		status := string(sub.Status)
		if typ == string(stripeapi.EventTypeCustomerSubscriptionDeleted) {
			status = billing.Canceled
		}
		return w.cfg.Store.ApplySubscription(ctx, id, typ, acct, sub.ID, status, unixTime(sub.CurrentPeriodEnd))
	case typ == string(stripeapi.EventTypeCheckoutSessionCompleted):
		return w.checkoutCompleted(ctx, ev)
	}
	return w.cfg.Store.RecordEvent(ctx, id, typ, acct)
}

func badObject(typ string, err error) error {
	return tenants.Errorf(tenants.EInvalidRequest, "the %s event's object does not parse: %s", typ, err)
}

func invoiceOf(in *stripeapi.Invoice) *billing.Invoice {
	inv := &billing.Invoice{
		ID: in.ID, Status: string(in.Status), AmountDue: in.AmountDue, AmountPaid: in.AmountPaid,
		Currency: string(in.Currency), PeriodStart: unixTime(in.PeriodStart), PeriodEnd: unixTime(in.PeriodEnd),
		HostedURL: in.HostedInvoiceURL,
	}
	if in.Customer != nil {
		inv.CustomerID = in.Customer.ID
	}
	return inv
}

// checkoutCompleted puts the consumer on the plan it paid for, then records the event
// with the checkout marked paid. The plan is set first, since it is in the tenants'
// store: when recording fails Stripe delivers again, and setting the same plan again
// changes nothing.
func (w *Webhook) checkoutCompleted(ctx context.Context, ev *stripeapi.Event) (bool, error) {
	var s stripeapi.CheckoutSession
	if err := json.Unmarshal(ev.Data.Raw, &s); err != nil {
		return false, badObject(string(ev.Type), err)
	}
	if seen, err := w.cfg.Store.EventSeen(ctx, ev.ID); err != nil || seen {
		return false, err
	}
	cs, err := w.cfg.Store.CheckoutSession(ctx, s.ID)
	if err != nil && tenants.ErrorCode(err) != tenants.ENotFound {
		return false, err
	}
	if cs == nil {
		w.log.Warn("stripe: completed checkout Tollgate did not make", "event", ev.ID, "session", s.ID)
	} else if err := w.setPlan(ctx, cs); err != nil {
		return false, err
	}
	subID := ""
	if s.Subscription != nil {
		subID = s.Subscription.ID
	}
	_, applied, err := w.cfg.Store.ApplyCheckout(ctx, ev.ID, string(ev.Type), ev.Account, s.ID, subID, w.cfg.Now().UTC())
	return applied, err
}

// setPlan puts the checkout's consumer on its plan, unless it is on it or gone.
func (w *Webhook) setPlan(ctx context.Context, cs *billing.CheckoutSession) error {
	c, err := w.cfg.Consumers.FindConsumer(ctx, cs.TenantID, cs.ConsumerID)
	if tenants.ErrorCode(err) == tenants.ENotFound {
		w.log.Warn("stripe: paid checkout of a deleted consumer", "session", cs.SessionID, "consumer", cs.ConsumerID)
		return nil
	} else if err != nil {
		return err
	}
	if c.Plan == cs.Plan {
		return nil
	}
	c.Plan = cs.Plan
	ctx = tenants.WithAudit(ctx, tenants.Audit{
		TenantID: cs.TenantID, Actor: AuditActor, Action: tenants.AuditAction("consumers", tenants.AuditUpdate), Object: c.ID,
	})
	return w.cfg.Consumers.UpdateConsumer(ctx, c)
}
