package billing

import "time"

// A consumer's plan bought through Checkout follows what Stripe says of the money: it is
// granted when Stripe says paid, taken back when a payment fails and the tenant's grace
// runs out or the subscription ends. Stripe delivers events late, twice and out of order,
// so each event moves an Entitlement by what it says and when Stripe made it (its
// `created`), never by when it arrived; what the consumer's plan should be follows from the
// Entitlement, and is applied apart from it (billing/stripe).

// Checkout statuses beyond pending and paid.
const (
	CheckoutFailed = "failed" // the delayed payment of a completed checkout failed
	CheckoutEnded  = "ended"  // the subscription is over (deleted, canceled, unpaid…)
)

// What Tollgate last did to the consumer of an Entitlement.
const (
	AppliedNone    = ""
	AppliedGranted = "granted"
	AppliedRevoked = "revoked"
)

// Why a plan is due to be taken back.
const (
	RevokePaymentFailed = "payment_failed" // a later payment cures it
	RevokeEnded         = "ended"          // nothing does: the consumer buys again
)

// What a Stripe event says of a checkout's money.
const (
	PaymentPaid   = "paid"   // completed paid or no payment required, async payment succeeded
	PaymentUnpaid = "unpaid" // completed with payment_status unpaid: nothing to grant yet
	PaymentGood   = "good"   // an invoice paid, the subscription active again
	PaymentFailed = "failed" // an invoice's payment failed, an async payment failed
	PaymentEnded  = "ended"  // the subscription was deleted or went canceled, unpaid, incomplete_expired
)

// Default graces, for a tenant that set none: a failed payment leaves Stripe's retries a
// few days to succeed before the plan goes; an ended subscription ends the plan at once,
// as the consumer (or Stripe, after its retries) chose to stop paying.
const (
	DefaultFailureGraceDays = 3
	DefaultEndGraceDays     = 0
	MaxGraceDays            = 60
)

// PaymentGrace is a tenant's grace before a plan bought through Checkout is taken back.
type PaymentGrace struct {
	FailureGraceDays int `json:"failure_grace_days"`
	EndGraceDays     int `json:"end_grace_days"`
}

// DefaultPaymentGrace is the grace of a tenant that set none.
var DefaultPaymentGrace = PaymentGrace{FailureGraceDays: DefaultFailureGraceDays, EndGraceDays: DefaultEndGraceDays}

// Entitlement is the state of one Checkout purchase: what Stripe said of it and what
// Tollgate did about it.
type Entitlement struct {
	SessionID      string
	TenantID       string
	ConsumerID     string
	Plan           string
	SubscriptionID string
	Status         string     // CheckoutPending, CheckoutPaid, CheckoutFailed, CheckoutEnded
	GoodAt, BadAt  *time.Time // the created time of the newest good and bad event
	RevokeAt       *time.Time // when the plan goes unless cured; nil: not due
	RevokeReason   string
	Applied        string  // AppliedNone, AppliedGranted, AppliedRevoked
	PreviousPlan   *string // the consumer's plan before the grant; nil: never granted
	Rev            int64
}

// Observe moves e by one event saying what of the money (Payment*) at created, with the
// tenant's grace; it reports whether anything changed. An event older than the newest one
// of the other kind is stale and changes nothing; at the same second a good one wins, as
// a real failure is followed by Stripe's retries and, at last, the subscription's end.
func (e *Entitlement) Observe(what string, created time.Time, g PaymentGrace) bool {
	before := *e
	staleBad := e.GoodAt != nil && !created.After(*e.GoodAt)
	staleGood := e.BadAt != nil && created.Before(*e.BadAt)
	switch what {
	case PaymentPaid:
		if e.Status == CheckoutEnded || staleGood {
			break
		}
		e.Status, e.GoodAt = CheckoutPaid, later(e.GoodAt, created)
		if e.RevokeReason == RevokePaymentFailed {
			e.RevokeAt, e.RevokeReason = nil, ""
		}
	case PaymentGood:
		if e.Status != CheckoutPaid || staleGood {
			break
		}
		e.GoodAt = later(e.GoodAt, created)
		if e.RevokeReason == RevokePaymentFailed {
			e.RevokeAt, e.RevokeReason = nil, ""
		}
	case PaymentFailed:
		if staleBad || e.Status == CheckoutEnded {
			break
		}
		e.BadAt = later(e.BadAt, created)
		switch e.Status {
		case CheckoutPending:
			e.Status = CheckoutFailed
		case CheckoutPaid:
			if e.RevokeAt == nil {
				at := created.Add(days(g.FailureGraceDays))
				e.RevokeAt, e.RevokeReason = &at, RevokePaymentFailed
			}
		}
	case PaymentEnded:
		if e.Status == CheckoutEnded {
			break
		}
		wasPaid := e.Status == CheckoutPaid
		e.Status, e.BadAt = CheckoutEnded, later(e.BadAt, created)
		if wasPaid || e.Applied == AppliedGranted {
			at := created.Add(days(g.EndGraceDays))
			if e.RevokeAt == nil || at.Before(*e.RevokeAt) {
				e.RevokeAt = &at
			}
			e.RevokeReason = RevokeEnded
		}
	}
	changed := e.Status != before.Status || !sameTime(e.GoodAt, before.GoodAt) || !sameTime(e.BadAt, before.BadAt) ||
		!sameTime(e.RevokeAt, before.RevokeAt) || e.RevokeReason != before.RevokeReason
	if changed {
		e.Rev++
	}
	return changed
}

// WantsPlan reports whether, at now, the consumer should hold the plan.
func (e *Entitlement) WantsPlan(now time.Time) bool {
	return e.Status == CheckoutPaid && !e.RevokeDue(now)
}

// RevokeDue reports whether the plan's grace is over at now.
func (e *Entitlement) RevokeDue(now time.Time) bool {
	return e.RevokeAt != nil && !e.RevokeAt.After(now)
}

func days(n int) time.Duration { return time.Duration(n) * 24 * time.Hour }

func later(t *time.Time, u time.Time) *time.Time {
	if t != nil && t.After(u) {
		return t
	}
	u = u.UTC()
	return &u
}

func sameTime(a, b *time.Time) bool {
	return a == nil && b == nil || a != nil && b != nil && a.Equal(*b)
}
