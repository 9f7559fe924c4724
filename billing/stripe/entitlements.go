package stripe

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"tollgate/billing"
	"tollgate/tenants"
)

// Entitlements makes each consumer's plan follow what Stripe said of its checkout
// (billing.Entitlement): the webhook applies an event's consequence at once, and Sweep,
// run periodically in the api beside the webhook, takes plans back when their grace ends
// and finishes what a crash left half done. Each session is applied by whoever holds its
// lease, so several replicas sweep safely; every change of a plan goes through
// tenants.ConsumerService, so the outbox carries it to the edges like any other.

// entitlementStore is what Entitlements needs of billing/postgres.Store.
type entitlementStore interface {
	ClaimEntitlement(ctx context.Context, sessionID string, now, leaseUntil time.Time) (*billing.Entitlement, error)
	ReleaseEntitlement(ctx context.Context, sessionID string, rev int64, applied string, previousPlan *string) (bool, error)
	DueEntitlements(ctx context.Context, now time.Time, limit int) ([]string, error)
}

// EntitlementLease is how long one applier holds a session; a crashed one's sessions are
// taken over after it.
const EntitlementLease = 30 * time.Second

// SweepEvery is how often the api sweeps by default.
const SweepEvery = time.Minute

// Entitlements applies checkouts' entitlements to consumers.
type Entitlements struct {
	Store     entitlementStore
	Consumers consumerPlans
	Logger    *slog.Logger
	Now       func() time.Time
}

func (en *Entitlements) now() time.Time {
	if en.Now != nil {
		return en.Now().UTC()
	}
	return time.Now().UTC()
}

func (en *Entitlements) log() *slog.Logger {
	if en.Logger != nil {
		return en.Logger
	}
	return slog.Default()
}

// Settle makes the session's consumer hold the plan or not, as its entitlement says now.
// It returns at once when another applier holds the session.
func (en *Entitlements) Settle(ctx context.Context, sessionID string) error {
	for range 5 {
		now := en.now()
		e, err := en.Store.ClaimEntitlement(ctx, sessionID, now, now.Add(EntitlementLease))
		if err != nil || e == nil {
			return err
		}
		applied, prev, err := en.enact(ctx, e, now)
		if err != nil {
			// The lease is given back untouched, so the next sweep tries again.
			_, _ = en.Store.ReleaseEntitlement(context.WithoutCancel(ctx), sessionID, e.Rev, e.Applied, e.PreviousPlan)
			return err
		}
		changed, err := en.Store.ReleaseEntitlement(ctx, sessionID, e.Rev, applied, prev)
		if err != nil || !changed {
			return err
		}
	}
	return nil
}

// Sweep settles every session due at now; it returns how many it settled.
func (en *Entitlements) Sweep(ctx context.Context) (int, error) {
	ids, err := en.Store.DueEntitlements(ctx, en.now(), 100)
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, id := range ids {
		if err := en.Settle(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	return len(ids), errors.Join(errs...)
}

// Run sweeps every interval until ctx ends.
func (en *Entitlements) Run(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = SweepEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if n, err := en.Sweep(ctx); err != nil && ctx.Err() == nil {
			en.log().Error("stripe: entitlement sweep", "err", err, "settled", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// enact changes the consumer's plan as e says at now and returns what was done. A plan
// is taken back only from a consumer still on it, and given again after a cured failure
// only to one still on the plan it went back to: someone else's change of the plan wins.
func (en *Entitlements) enact(ctx context.Context, e *billing.Entitlement, now time.Time) (string, *string, error) {
	revoke := e.Applied == billing.AppliedGranted && e.RevokeDue(now)
	grant := e.Applied != billing.AppliedGranted && e.WantsPlan(now)
	if !revoke && !grant {
		return e.Applied, e.PreviousPlan, nil
	}
	for range 3 {
		c, err := en.Consumers.FindConsumer(ctx, e.TenantID, e.ConsumerID)
		if tenants.ErrorCode(err) == tenants.ENotFound {
			if revoke {
				return billing.AppliedRevoked, e.PreviousPlan, nil
			}
			return billing.AppliedGranted, e.PreviousPlan, nil
		}
		if err != nil {
			return "", nil, err
		}
		prev, target := e.PreviousPlan, ""
		switch {
		case revoke:
			if c.Plan != e.Plan {
				return billing.AppliedRevoked, prev, nil
			}
			if prev != nil {
				target = *prev
			}
		case e.Applied == billing.AppliedNone:
			was := c.Plan
			prev, target = &was, e.Plan
		default: // granted again after a cured failure
			if prev != nil && c.Plan != *prev || prev == nil && c.Plan != "" {
				return billing.AppliedGranted, prev, nil
			}
			target = e.Plan
		}
		result := billing.AppliedGranted
		if revoke {
			result = billing.AppliedRevoked
		}
		if c.Plan == target {
			return result, prev, nil
		}
		err = en.setPlan(ctx, c, target, e)
		if revoke && tenants.ErrorCode(err) == tenants.EValidation && target != "" {
			// The plan it had is gone: it goes back to none.
			c, err = en.Consumers.FindConsumer(ctx, e.TenantID, e.ConsumerID)
			if err == nil {
				err = en.setPlan(ctx, c, "", e)
			}
		}
		if tenants.ErrorCode(err) == tenants.EVersionConflict {
			continue
		}
		if err != nil {
			return "", nil, err
		}
		en.log().Info("stripe: consumer plan follows its payments", "session", e.SessionID, "consumer", e.ConsumerID,
			"plan", target, "action", result, "reason", e.RevokeReason)
		return result, prev, nil
	}
	return "", nil, tenants.Errorf(tenants.EVersionConflict, "consumer %s kept changing", e.ConsumerID)
}

func (en *Entitlements) setPlan(ctx context.Context, c *tenants.Consumer, plan string, e *billing.Entitlement) error {
	c.Plan = plan
	ctx = tenants.WithAudit(ctx, tenants.Audit{
		TenantID: e.TenantID, Actor: AuditActor, Action: tenants.AuditAction("consumers", tenants.AuditUpdate), Object: c.ID,
	})
	return en.Consumers.UpdateConsumer(ctx, c)
}
