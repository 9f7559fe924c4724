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
//   - checkout.session.completed: paid (payment_status paid or no_payment_required) puts
//     the consumer on the plan it bought; unpaid records the session pending and grants
//     nothing until checkout.session.async_payment_succeeded (…_failed: never granted);
//   - invoice.paid / invoice.payment_failed and customer.subscription.* of a consumer's
//     subscription: a failed payment takes the plan back after the tenant's grace unless a
//     later payment arrives first; an ended subscription (deleted, or updated to
//     canceled, unpaid or incomplete_expired) takes it back after the end grace. Each
//     event counts by Stripe's `created`, so a stale one changes nothing (Entitlement);
//     the plan changes through tenants.ConsumerService (audited as "stripe"), so the edges
//     get it through the outbox;
//   - other invoice.*: the invoice's status and amounts, by customer → tenant (a connected
//     account's invoices are the tenant's business: recorded only);
//   - other customer.subscription.*: the tenant's subscription's status and period end
//     (deleted: canceled);
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
	CheckoutOfSubscription(ctx context.Context, subscriptionID string) (string, error)
	ObservePayment(ctx context.Context, id, typ, account, sessionID, subscriptionID, what string, created time.Time) (bool, error)
	Entitlement(ctx context.Context, sessionID string) (*billing.Entitlement, error)
	entitlementStore
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
	en  *Entitlements
}

// Entitlements is the applier the webhook settles consumers' plans with, for the api to
// sweep with too.
func (w *Webhook) Entitlements() *Entitlements { return w.en }

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
	log := cfg.Logger.With("component", "stripe_webhook")
	en := &Entitlements{Store: cfg.Store, Consumers: cfg.Consumers, Logger: log, Now: cfg.Now}
	return &Webhook{cfg: cfg, log: log, en: en}, nil
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
	if session, what, subID, err := w.payment(ctx, ev); err != nil {
		return false, err
	} else if session != "" {
		applied, err := w.cfg.Store.ObservePayment(ctx, id, typ, acct, session, subID, what, time.Unix(ev.Created, 0).UTC())
		if err != nil {
			return false, err
		}
		// A duplicate settles too: the first delivery may have recorded the event and
		// failed before the plan changed.
		return applied, w.en.Settle(ctx, session)
	}
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

// payment reads what a checkout's or a consumer subscription's event says of the money:
// session "" when the event is about no checkout Tollgate made.
func (w *Webhook) payment(ctx context.Context, ev *stripeapi.Event) (session, what, subID string, err error) {
	typ := stripeapi.EventType(ev.Type)
	switch typ {
	case stripeapi.EventTypeCheckoutSessionCompleted, stripeapi.EventTypeCheckoutSessionAsyncPaymentSucceeded,
		stripeapi.EventTypeCheckoutSessionAsyncPaymentFailed:
		var s stripeapi.CheckoutSession
		if err := json.Unmarshal(ev.Data.Raw, &s); err != nil {
			return "", "", "", badObject(string(typ), err)
		}
		if s.Subscription != nil {
			subID = s.Subscription.ID
		}
		switch {
		case typ == stripeapi.EventTypeCheckoutSessionAsyncPaymentSucceeded:
			what = billing.PaymentPaid
		case typ == stripeapi.EventTypeCheckoutSessionAsyncPaymentFailed:
			what = billing.PaymentFailed
		case s.PaymentStatus == stripeapi.CheckoutSessionPaymentStatusPaid,
			s.PaymentStatus == stripeapi.CheckoutSessionPaymentStatusNoPaymentRequired:
			what = billing.PaymentPaid
		default:
			what = billing.PaymentUnpaid
		}
		if s.ID == "" {
			return "", "", "", nil
		}
		cs, err := w.cfg.Store.Entitlement(ctx, s.ID)
		if tenants.ErrorCode(err) == tenants.ENotFound {
			w.log.Warn("stripe: checkout event of a session Tollgate did not make", "event", ev.ID, "session", s.ID)
			return "", "", "", nil
		}
		if err != nil {
			return "", "", "", err
		}
		return cs.SessionID, what, subID, nil
	case stripeapi.EventTypeInvoicePaid, stripeapi.EventTypeInvoicePaymentSucceeded, stripeapi.EventTypeInvoicePaymentFailed:
		var in stripeapi.Invoice
		if err := json.Unmarshal(ev.Data.Raw, &in); err != nil {
			return "", "", "", badObject(string(typ), err)
		}
		if in.Subscription == nil {
			return "", "", "", nil
		}
		what = billing.PaymentGood
		if typ == stripeapi.EventTypeInvoicePaymentFailed {
			what = billing.PaymentFailed
		}
		subID = in.Subscription.ID
	case stripeapi.EventTypeCustomerSubscriptionDeleted, stripeapi.EventTypeCustomerSubscriptionUpdated:
		var sub stripeapi.Subscription
		if err := json.Unmarshal(ev.Data.Raw, &sub); err != nil {
			return "", "", "", badObject(string(typ), err)
		}
		subID = sub.ID
		switch {
		case typ == stripeapi.EventTypeCustomerSubscriptionDeleted, sub.Status == stripeapi.SubscriptionStatusCanceled,
			sub.Status == stripeapi.SubscriptionStatusUnpaid, sub.Status == stripeapi.SubscriptionStatusIncompleteExpired:
			what = billing.PaymentEnded
		case sub.Status == stripeapi.SubscriptionStatusActive, sub.Status == stripeapi.SubscriptionStatusTrialing:
			what = billing.PaymentGood
		default:
			return "", "", "", nil
		}
	default:
		return "", "", "", nil
	}
	session, err = w.cfg.Store.CheckoutOfSubscription(ctx, subID)
	return session, what, "", err
}
