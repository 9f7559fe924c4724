package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"tollgate/billing"
	"tollgate/tenants"
)

// Customer returns the Stripe customer of a tenant: ENotFound when billing is not enabled
// for it.
func (s *Store) Customer(ctx context.Context, tenantID string) (string, error) {
	if !validUUID(tenantID) {
		return "", tenants.Errorf(tenants.ENotFound, "no billing customer for tenant %q", tenantID)
	}
	var id string
	err := s.pool.QueryRow(ctx, `SELECT stripe_customer_id FROM billing_customers WHERE tenant_id = $1`, tenantID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", tenants.Errorf(tenants.ENotFound, "no billing customer for tenant %q", tenantID)
	}
	return id, err
}

// SetCustomer records a tenant's Stripe customer unless it has one, and returns the one
// it has (so two racing enables agree on the first).
func (s *Store) SetCustomer(ctx context.Context, tenantID, customerID string) (string, error) {
	if !validUUID(tenantID) {
		return "", tenants.Invalid("tenant_id", "must be a UUID")
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO billing_customers (tenant_id, stripe_customer_id) VALUES ($1, $2)
		ON CONFLICT (tenant_id) DO NOTHING`, tenantID, customerID); err != nil {
		return "", fmt.Errorf("billing customer: %w", err)
	}
	return s.Customer(ctx, tenantID)
}

// BillingCustomers maps every tenant billed through Stripe to its customer.
func (s *Store) BillingCustomers(ctx context.Context) (map[string]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant_id::text, stripe_customer_id FROM billing_customers`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var t, c string
		if err := rows.Scan(&t, &c); err != nil {
			return nil, err
		}
		out[t] = c
	}
	return out, rows.Err()
}

// PushTotals sums the pushes of period p per tenant and hour, by meter and state.
func (s *Store) PushTotals(ctx context.Context, p billing.Period) ([]billing.PushTotal, error) {
	rows, err := s.pool.Query(ctx, `SELECT tenant_id::text, hour,
			coalesce(sum(quantity) FILTER (WHERE meter = 'requests' AND status = 'pushed'), 0),
			coalesce(sum(quantity) FILTER (WHERE meter = 'requests' AND status = 'pending'), 0),
			coalesce(sum(quantity) FILTER (WHERE meter = 'requests' AND status = 'failed'), 0),
			coalesce(sum(quantity) FILTER (WHERE meter = 'function_us' AND status = 'pushed'), 0),
			coalesce(sum(quantity) FILTER (WHERE meter = 'function_us' AND status = 'pending'), 0),
			coalesce(sum(quantity) FILTER (WHERE meter = 'function_us' AND status = 'failed'), 0)
		FROM stripe_pushes WHERE hour >= $1 AND hour < $2 GROUP BY 1, 2 ORDER BY 1, 2`, p.Start(), p.End())
	if err != nil {
		return nil, fmt.Errorf("push totals: %w", err)
	}
	defer rows.Close()
	var out []billing.PushTotal
	for rows.Next() {
		var t billing.PushTotal
		if err := rows.Scan(&t.TenantID, &t.Hour, &t.Pushed, &t.Pending, &t.Failed,
			&t.FunctionPushed, &t.FunctionPending, &t.FunctionFailed); err != nil {
			return nil, err
		}
		t.Hour = t.Hour.UTC()
		out = append(out, t)
	}
	return out, rows.Err()
}

// PlanPushes records the pushes that are due: for every tenant with a Stripe customer,
// every hour in [since, settledBefore − 1h] and each meter — billable requests, function
// time (µs) — whose rollup exceeds what the meter's pushes so far carry (pushed, pending
// or failed), a pending push of the difference at the meter's next revision, due at now
// (the pusher's clock, not the database's). An hour without function time plans no
// function push. It returns how many it planned. Planning twice plans nothing new; two
// planners racing insert each push once (primary key).
func (s *Store) PlanPushes(ctx context.Context, since, settledBefore, now time.Time) (int, error) {
	rows, err := s.pool.Query(ctx, `
		WITH hourly AS (
			SELECT u.tenant_id, u.hour, sum(u.billable) AS billable, sum(u.function_us) AS function_us
			FROM usage_hourly u JOIN billing_customers c ON c.tenant_id = u.tenant_id
			WHERE u.hour >= $1 AND u.hour + interval '1 hour' <= $2
			GROUP BY u.tenant_id, u.hour
		), folded AS (
			SELECT tenant_id, hour, 'requests' AS meter, billable AS quantity FROM hourly
			UNION ALL
			SELECT tenant_id, hour, 'function_us', function_us FROM hourly
		), planned AS (
			SELECT tenant_id, meter, hour, max(revision) AS revision, sum(quantity) AS quantity
			FROM stripe_pushes WHERE hour >= $1 GROUP BY tenant_id, meter, hour
		)
		SELECT f.tenant_id::text, f.meter, f.hour, coalesce(p.revision, 0) + 1, f.quantity - coalesce(p.quantity, 0), c.stripe_customer_id
		FROM folded f
		JOIN billing_customers c ON c.tenant_id = f.tenant_id
		LEFT JOIN planned p ON p.tenant_id = f.tenant_id AND p.meter = f.meter AND p.hour = f.hour
		WHERE f.quantity > coalesce(p.quantity, 0)
		ORDER BY 1, 3, 2`, since, settledBefore)
	if err != nil {
		return 0, fmt.Errorf("plan pushes: %w", err)
	}
	var plans []billing.Push
	for rows.Next() {
		var p billing.Push
		if err := rows.Scan(&p.TenantID, &p.Meter, &p.Hour, &p.Revision, &p.Quantity, &p.CustomerID); err != nil {
			rows.Close()
			return 0, err
		}
		p.Hour = p.Hour.UTC()
		p.Identifier = billing.MeterPushIdentifier(p.Meter, p.TenantID, p.Hour, p.Revision)
		plans = append(plans, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	n := 0
	for _, p := range plans {
		tag, err := s.pool.Exec(ctx, `INSERT INTO stripe_pushes
				(tenant_id, meter, hour, revision, identifier, stripe_customer_id, quantity, next_attempt_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING`,
			p.TenantID, p.Meter, p.Hour, p.Revision, p.Identifier, p.CustomerID, p.Quantity, now)
		if err != nil {
			return n, fmt.Errorf("plan push %s: %w", p.Identifier, err)
		}
		n += int(tag.RowsAffected())
	}
	return n, nil
}

const pushColumns = `tenant_id::text, meter, hour, revision, identifier, stripe_customer_id,
	quantity, status, attempts, last_error`

// DuePushes returns up to limit pending pushes whose next attempt is due, oldest first
// (an hour's requests before its function time).
func (s *Store) DuePushes(ctx context.Context, now time.Time, limit int) ([]billing.Push, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+pushColumns+`
		FROM stripe_pushes WHERE status = 'pending' AND next_attempt_at <= $1
		ORDER BY hour, tenant_id, meter DESC, revision LIMIT $2`, now, limit)
	if err != nil {
		return nil, fmt.Errorf("due pushes: %w", err)
	}
	defer rows.Close()
	var out []billing.Push
	for rows.Next() {
		var p billing.Push
		if err := rows.Scan(&p.TenantID, &p.Meter, &p.Hour, &p.Revision, &p.Identifier, &p.CustomerID,
			&p.Quantity, &p.Status, &p.Attempts, &p.LastError); err != nil {
			return nil, err
		}
		p.Hour = p.Hour.UTC()
		out = append(out, p)
	}
	return out, rows.Err()
}

// Pushes returns every push of a tenant, in hour, meter (requests first) and revision
// order.
func (s *Store) Pushes(ctx context.Context, tenantID string) ([]billing.Push, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+pushColumns+`
		FROM stripe_pushes WHERE tenant_id = $1 ORDER BY hour, meter DESC, revision`, tenantID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []billing.Push
	for rows.Next() {
		var p billing.Push
		if err := rows.Scan(&p.TenantID, &p.Meter, &p.Hour, &p.Revision, &p.Identifier, &p.CustomerID,
			&p.Quantity, &p.Status, &p.Attempts, &p.LastError); err != nil {
			return nil, err
		}
		p.Hour = p.Hour.UTC()
		out = append(out, p)
	}
	return out, rows.Err()
}

// PushSucceeded marks a push accepted by Stripe.
func (s *Store) PushSucceeded(ctx context.Context, identifier string, at time.Time) error {
	_, err := s.pool.Exec(ctx, `UPDATE stripe_pushes SET status = 'pushed', pushed_at = $2,
		attempts = attempts + 1, last_error = '' WHERE identifier = $1 AND status = 'pending'`, identifier, at)
	return err
}

// PushFailed records a failed attempt: the push is retried at next, or given up on when
// permanent.
func (s *Store) PushFailed(ctx context.Context, identifier, msg string, next time.Time, permanent bool) error {
	status := billing.PushPending
	if permanent {
		status = billing.PushFailed
	}
	_, err := s.pool.Exec(ctx, `UPDATE stripe_pushes SET status = $2, attempts = attempts + 1,
		last_error = $3, next_attempt_at = $4 WHERE identifier = $1 AND status = 'pending'`, identifier, status, msg, next)
	return err
}

// Stripe objects made once, and what Stripe's webhooks report (migration 00016).

// StripePrice returns the Stripe objects of a platform price version: ENotFound when
// they were not made yet.
func (s *Store) StripePrice(ctx context.Context, plan, from, fingerprint string) (*billing.StripePrice, error) {
	p := &billing.StripePrice{Plan: plan, EffectiveFrom: from, Fingerprint: fingerprint}
	err := s.pool.QueryRow(ctx, `SELECT product_id, fee_price_id, usage_price_id, function_price_id FROM stripe_prices
		WHERE plan = $1 AND effective_from = $2 AND fingerprint = $3`, plan, from, fingerprint).Scan(&p.ProductID, &p.FeePriceID, &p.UsagePriceID, &p.FunctionPriceID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, tenants.Errorf(tenants.ENotFound, "no Stripe price for plan %q from %s", plan, from)
	}
	return p, err
}

// SetStripePrice remembers the Stripe objects of a price version unless some are
// remembered already, and returns those (two racing subscribers agree on the first).
func (s *Store) SetStripePrice(ctx context.Context, p *billing.StripePrice) (*billing.StripePrice, error) {
	if _, err := s.pool.Exec(ctx, `INSERT INTO stripe_prices (plan, effective_from, fingerprint, product_id, fee_price_id, usage_price_id, function_price_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`, p.Plan, p.EffectiveFrom, p.Fingerprint, p.ProductID, p.FeePriceID, p.UsagePriceID, p.FunctionPriceID); err != nil {
		return nil, fmt.Errorf("stripe price: %w", err)
	}
	return s.StripePrice(ctx, p.Plan, p.EffectiveFrom, p.Fingerprint)
}

const subscriptionColumns = `s.tenant_id::text, s.stripe_customer_id, s.subscription_id, s.generation, s.plan,
	s.effective_from, s.fingerprint, s.status, s.current_period_end`

func scanSubscription(row pgx.Row) (*billing.Subscription, error) {
	var sub billing.Subscription
	if err := row.Scan(&sub.TenantID, &sub.CustomerID, &sub.SubscriptionID, &sub.Generation, &sub.Plan,
		&sub.EffectiveFrom, &sub.Fingerprint, &sub.Status, &sub.CurrentPeriodEnd); err != nil {
		return nil, err
	}
	return &sub, nil
}

// BilledTenants lists every tenant with its subscription, and the deleted tenants whose
// subscription is not canceled (Gone).
func (s *Store) BilledTenants(ctx context.Context) ([]billing.BilledTenant, error) {
	rows, err := s.pool.Query(ctx, `SELECT coalesce(t.id, s.tenant_id)::text, coalesce(t.slug, ''), coalesce(t.name, ''),
			coalesce(t.plan, s.plan), t.id IS NULL, s.tenant_id IS NOT NULL,
			coalesce(s.tenant_id::text, ''), coalesce(s.stripe_customer_id, ''), coalesce(s.subscription_id, ''),
			coalesce(s.generation, 0), coalesce(s.plan, ''), coalesce(s.effective_from, ''), coalesce(s.fingerprint, ''), coalesce(s.status, ''),
			s.current_period_end
		FROM tenants t FULL JOIN stripe_subscriptions s ON s.tenant_id = t.id
		WHERE t.id IS NOT NULL OR s.status <> 'canceled'
		ORDER BY 2, 1`)
	if err != nil {
		return nil, fmt.Errorf("billed tenants: %w", err)
	}
	defer rows.Close()
	var out []billing.BilledTenant
	for rows.Next() {
		var t billing.BilledTenant
		var sub billing.Subscription
		var has bool
		if err := rows.Scan(&t.ID, &t.Slug, &t.Name, &t.Plan, &t.Gone, &has, &sub.TenantID, &sub.CustomerID,
			&sub.SubscriptionID, &sub.Generation, &sub.Plan, &sub.EffectiveFrom, &sub.Fingerprint, &sub.Status, &sub.CurrentPeriodEnd); err != nil {
			return nil, err
		}
		if has {
			t.Subscription = &sub
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// Subscription returns a tenant's subscription: ENotFound when it never had one.
func (s *Store) Subscription(ctx context.Context, tenantID string) (*billing.Subscription, error) {
	if !validUUID(tenantID) {
		return nil, tenants.Errorf(tenants.ENotFound, "no subscription for tenant %q", tenantID)
	}
	sub, err := scanSubscription(s.pool.QueryRow(ctx, `SELECT `+subscriptionColumns+`
		FROM stripe_subscriptions s WHERE s.tenant_id = $1`, tenantID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, tenants.Errorf(tenants.ENotFound, "no subscription for tenant %q", tenantID)
	}
	return sub, err
}

// SaveSubscription records a tenant's subscription as the subscriber last made or changed
// it.
func (s *Store) SaveSubscription(ctx context.Context, sub *billing.Subscription) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO stripe_subscriptions (tenant_id, stripe_customer_id, subscription_id,
			generation, plan, effective_from, fingerprint, status, current_period_end)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (tenant_id) DO UPDATE SET stripe_customer_id = $2, subscription_id = $3, generation = $4,
			plan = $5, effective_from = $6, fingerprint = $7, status = $8,
			current_period_end = coalesce($9, stripe_subscriptions.current_period_end), updated_at = now()`,
		sub.TenantID, sub.CustomerID, sub.SubscriptionID, sub.Generation, sub.Plan, sub.EffectiveFrom, sub.Fingerprint,
		sub.Status, sub.CurrentPeriodEnd)
	if err != nil {
		return fmt.Errorf("save subscription: %w", err)
	}
	return nil
}

// inEvent runs apply in the transaction that records the webhook event, unless the event
// was recorded before: applied is false then, and nothing changes.
func (s *Store) inEvent(ctx context.Context, id, typ, account string, apply func(pgx.Tx) error) (applied bool, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO stripe_webhook_events (event_id, type, account) VALUES ($1, $2, $3)
			ON CONFLICT DO NOTHING`, id, typ, account)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		applied = true
		if apply == nil {
			return nil
		}
		return apply(tx)
	})
	if err != nil {
		return false, fmt.Errorf("stripe event %s: %w", id, err)
	}
	return applied, nil
}

// EventSeen reports whether a webhook event was recorded.
func (s *Store) EventSeen(ctx context.Context, id string) (bool, error) {
	var seen bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM stripe_webhook_events WHERE event_id = $1)`, id).Scan(&seen)
	return seen, err
}

// RecordEvent records an event that changes nothing (a type Tollgate does not act on).
func (s *Store) RecordEvent(ctx context.Context, id, typ, account string) (bool, error) {
	return s.inEvent(ctx, id, typ, account, nil)
}

// ApplyInvoice records the event and upserts the invoice it carries; the tenant is the
// one whose Stripe customer it is.
func (s *Store) ApplyInvoice(ctx context.Context, id, typ, account string, inv *billing.Invoice) (bool, error) {
	return s.inEvent(ctx, id, typ, account, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO stripe_invoices (invoice_id, tenant_id, stripe_customer_id, status, amount_due,
				amount_paid, currency, period_start, period_end, hosted_url)
			VALUES ($1, (SELECT tenant_id FROM billing_customers WHERE stripe_customer_id = $2 LIMIT 1), $2, $3, $4, $5, $6, $7, $8, $9)
			ON CONFLICT (invoice_id) DO UPDATE SET status = $3, amount_due = $4, amount_paid = $5, currency = $6,
				period_start = $7, period_end = $8, hosted_url = $9, updated_at = now()`,
			inv.ID, inv.CustomerID, inv.Status, inv.AmountDue, inv.AmountPaid, inv.Currency, inv.PeriodStart, inv.PeriodEnd, inv.HostedURL)
		return err
	})
}

// ApplySubscription records the event and sets the status and period end of the
// subscription it names (a subscription Tollgate did not make changes nothing).
func (s *Store) ApplySubscription(ctx context.Context, id, typ, account, subscriptionID, status string, periodEnd *time.Time) (bool, error) {
	return s.inEvent(ctx, id, typ, account, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE stripe_subscriptions SET status = $2,
				current_period_end = coalesce($3, current_period_end), updated_at = now()
			WHERE subscription_id = $1`, subscriptionID, status, periodEnd)
		return err
	})
}

// ApplyCheckout records the event and marks the session paid, returning the session as
// recorded when it was made (nil: a session Tollgate did not make).
func (s *Store) ApplyCheckout(ctx context.Context, id, typ, account, sessionID, subscriptionID string, at time.Time) (*billing.CheckoutSession, bool, error) {
	var cs *billing.CheckoutSession
	applied, err := s.inEvent(ctx, id, typ, account, func(tx pgx.Tx) error {
		row := tx.QueryRow(ctx, `UPDATE stripe_checkouts SET status = 'paid', completed_at = $3,
				subscription_id = CASE WHEN $2 = '' THEN subscription_id ELSE $2 END
			WHERE session_id = $1 RETURNING `+checkoutColumns, sessionID, subscriptionID, at)
		var err error
		cs, err = scanCheckout(row)
		if errors.Is(err, pgx.ErrNoRows) {
			cs, err = nil, nil
		}
		return err
	})
	return cs, applied, err
}

const checkoutColumns = `session_id, tenant_id::text, consumer_id, plan, status, amount, currency, connected_account,
	subscription_id, created_at, completed_at`

func scanCheckout(row pgx.Row) (*billing.CheckoutSession, error) {
	var c billing.CheckoutSession
	if err := row.Scan(&c.SessionID, &c.TenantID, &c.ConsumerID, &c.Plan, &c.Status, &c.Amount, &c.Currency,
		&c.Account, &c.SubscriptionID, &c.CreatedAt, &c.CompletedAt); err != nil {
		return nil, err
	}
	return &c, nil
}

// RecordCheckout records a session made (pending); recording the same session again
// changes nothing.
func (s *Store) RecordCheckout(ctx context.Context, c *billing.CheckoutSession) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO stripe_checkouts (session_id, tenant_id, consumer_id, plan, amount, currency, connected_account)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (session_id) DO NOTHING`,
		c.SessionID, c.TenantID, c.ConsumerID, c.Plan, c.Amount, c.Currency, c.Account)
	if err != nil {
		return fmt.Errorf("record checkout: %w", err)
	}
	return nil
}

// Checkouts returns a tenant's latest checkouts (up to limit), newest first.
func (s *Store) Checkouts(ctx context.Context, tenantID string, limit int) ([]billing.CheckoutSession, error) {
	if !validUUID(tenantID) {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT `+checkoutColumns+` FROM stripe_checkouts WHERE tenant_id = $1
		ORDER BY created_at DESC, session_id LIMIT $2`, tenantID, limit)
	if err != nil {
		return nil, fmt.Errorf("checkouts: %w", err)
	}
	defer rows.Close()
	var out []billing.CheckoutSession
	for rows.Next() {
		c, err := scanCheckout(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *c)
	}
	return out, rows.Err()
}

// ConnectedAccount is the tenant's Stripe Connect account, "" when it has none.
func (s *Store) ConnectedAccount(ctx context.Context, tenantID string) (string, error) {
	if !validUUID(tenantID) {
		return "", nil
	}
	var acct string
	err := s.pool.QueryRow(ctx, `SELECT account_id FROM stripe_accounts WHERE tenant_id = $1`, tenantID).Scan(&acct)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return acct, err
}

// SetConnectedAccount sets the tenant's connected account; "" removes it. EValidation
// when the id is not an acct_ id. The audit entry attached to ctx (tenants.WithAudit), if
// any, is written in the same transaction.
func (s *Store) SetConnectedAccount(ctx context.Context, tenantID, account string) error {
	if account != "" {
		if err := billing.ValidAccount(account); err != nil {
			return err
		}
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if account == "" {
			_, err = tx.Exec(ctx, `DELETE FROM stripe_accounts WHERE tenant_id = $1`, tenantID)
		} else {
			_, err = tx.Exec(ctx, `INSERT INTO stripe_accounts (tenant_id, account_id) VALUES ($1, $2)
				ON CONFLICT (tenant_id) DO UPDATE SET account_id = $2, updated_at = now()`, tenantID, account)
		}
		if err != nil {
			return err
		}
		return recordAudit(ctx, tx, tenantID, account)
	})
	if err != nil {
		return fmt.Errorf("connected account: %w", err)
	}
	return nil
}

const invoiceColumns = `i.invoice_id, coalesce(i.tenant_id::text, ''), coalesce(t.slug, ''), i.stripe_customer_id, i.status,
	i.amount_due, i.amount_paid, i.currency, i.period_start, i.period_end, i.hosted_url, i.updated_at`

func scanInvoice(row pgx.Row) (*billing.Invoice, error) {
	var i billing.Invoice
	if err := row.Scan(&i.ID, &i.TenantID, &i.Tenant, &i.CustomerID, &i.Status, &i.AmountDue, &i.AmountPaid,
		&i.Currency, &i.PeriodStart, &i.PeriodEnd, &i.HostedURL, &i.UpdatedAt); err != nil {
		return nil, err
	}
	return &i, nil
}

// Invoices lists the invoices whose billing period starts in p, by tenant slug.
func (s *Store) Invoices(ctx context.Context, p billing.Period) ([]billing.Invoice, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+invoiceColumns+` FROM stripe_invoices i LEFT JOIN tenants t ON t.id = i.tenant_id
		WHERE i.period_start >= $1 AND i.period_start < $2 ORDER BY 3, i.period_start, 1`, p.Start(), p.End())
	if err != nil {
		return nil, fmt.Errorf("invoices: %w", err)
	}
	defer rows.Close()
	out := []billing.Invoice{}
	for rows.Next() {
		i, err := scanInvoice(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *i)
	}
	return out, rows.Err()
}

// Payments lists, for every tenant with a subscription or an invoice, its subscription and
// its latest invoice, by slug.
func (s *Store) Payments(ctx context.Context) ([]billing.TenantPayments, error) {
	rows, err := s.pool.Query(ctx, `WITH ids AS (
			SELECT tenant_id FROM stripe_subscriptions UNION SELECT tenant_id FROM stripe_invoices WHERE tenant_id IS NOT NULL
		), latest AS (
			SELECT DISTINCT ON (tenant_id) * FROM stripe_invoices WHERE tenant_id IS NOT NULL
			ORDER BY tenant_id, period_start DESC NULLS LAST, created_at DESC
		)
		SELECT ids.tenant_id::text, coalesce(t.slug, ''), s.subscription_id IS NOT NULL, coalesce(s.subscription_id, ''),
			coalesce(s.plan, ''), coalesce(s.status, ''), s.current_period_end,
			i.invoice_id IS NOT NULL, coalesce(i.invoice_id, ''), coalesce(i.status, ''), coalesce(i.amount_due, 0),
			coalesce(i.amount_paid, 0), coalesce(i.currency, ''), i.period_start, i.period_end, coalesce(i.hosted_url, '')
		FROM ids LEFT JOIN tenants t ON t.id = ids.tenant_id
		LEFT JOIN stripe_subscriptions s ON s.tenant_id = ids.tenant_id
		LEFT JOIN latest i ON i.tenant_id = ids.tenant_id
		ORDER BY 2, 1`)
	if err != nil {
		return nil, fmt.Errorf("payments: %w", err)
	}
	defer rows.Close()
	var out []billing.TenantPayments
	for rows.Next() {
		var p billing.TenantPayments
		var sub billing.Subscription
		var inv billing.Invoice
		var hasSub, hasInv bool
		if err := rows.Scan(&p.TenantID, &p.Tenant, &hasSub, &sub.SubscriptionID, &sub.Plan, &sub.Status, &sub.CurrentPeriodEnd,
			&hasInv, &inv.ID, &inv.Status, &inv.AmountDue, &inv.AmountPaid, &inv.Currency, &inv.PeriodStart, &inv.PeriodEnd,
			&inv.HostedURL); err != nil {
			return nil, err
		}
		if hasSub {
			p.Subscription = &sub
		}
		if hasInv {
			p.Invoice = &inv
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// CheckoutSession returns a recorded Checkout session: ENotFound for one Tollgate did
// not make.
func (s *Store) CheckoutSession(ctx context.Context, sessionID string) (*billing.CheckoutSession, error) {
	c, err := scanCheckout(s.pool.QueryRow(ctx, `SELECT `+checkoutColumns+` FROM stripe_checkouts WHERE session_id = $1`, sessionID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, tenants.Errorf(tenants.ENotFound, "no checkout session %q", sessionID)
	}
	return c, err
}

const entitlementColumns = `session_id, tenant_id::text, consumer_id, plan, subscription_id, status, good_at, bad_at,
	revoke_at, revoke_reason, applied, previous_plan, rev`

func scanEntitlement(row pgx.Row) (*billing.Entitlement, error) {
	var e billing.Entitlement
	if err := row.Scan(&e.SessionID, &e.TenantID, &e.ConsumerID, &e.Plan, &e.SubscriptionID, &e.Status, &e.GoodAt,
		&e.BadAt, &e.RevokeAt, &e.RevokeReason, &e.Applied, &e.PreviousPlan, &e.Rev); err != nil {
		return nil, err
	}
	return &e, nil
}

// CheckoutOfSubscription is the session whose checkout made the subscription: "" when
// no checkout did (a tenant's own subscription, or one not known yet).
func (s *Store) CheckoutOfSubscription(ctx context.Context, subscriptionID string) (string, error) {
	if subscriptionID == "" {
		return "", nil
	}
	var id string
	err := s.pool.QueryRow(ctx, `SELECT session_id FROM stripe_checkouts WHERE subscription_id = $1
		ORDER BY created_at DESC LIMIT 1`, subscriptionID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return id, err
}

// ObservePayment records the event and, in its transaction, moves the checkout's
// entitlement by what the event says (billing.Entitlement.Observe) with the tenant's
// grace; subscriptionID, when set, is recorded on the checkout. applied is false for a
// duplicate; a session Tollgate did not make records the event and changes nothing.
func (s *Store) ObservePayment(ctx context.Context, id, typ, account, sessionID, subscriptionID, what string, created time.Time) (bool, error) {
	return s.inEvent(ctx, id, typ, account, func(tx pgx.Tx) error {
		e, err := scanEntitlement(tx.QueryRow(ctx, `SELECT `+entitlementColumns+` FROM stripe_checkouts
			WHERE session_id = $1 FOR UPDATE`, sessionID))
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		g, err := paymentGrace(ctx, tx, e.TenantID)
		if err != nil {
			return err
		}
		changed := e.Observe(what, created, g)
		if !changed && (subscriptionID == "" || subscriptionID == e.SubscriptionID) {
			return nil
		}
		if subscriptionID != "" {
			e.SubscriptionID = subscriptionID
		}
		_, err = tx.Exec(ctx, `UPDATE stripe_checkouts SET status = $2, good_at = $3, bad_at = $4, revoke_at = $5,
				revoke_reason = $6, rev = $7, subscription_id = $8,
				completed_at = CASE WHEN $2 = 'paid' THEN coalesce(completed_at, now()) ELSE completed_at END
			WHERE session_id = $1`, e.SessionID, e.Status, e.GoodAt, e.BadAt, e.RevokeAt, e.RevokeReason, e.Rev, e.SubscriptionID)
		return err
	})
}

// ClaimEntitlement takes the checkout's entitlement for the caller to apply until
// leaseUntil: nil when another holds it (it sees any change made meanwhile, by rev) or
// there is no such session. now and leaseUntil are the caller's clock.
func (s *Store) ClaimEntitlement(ctx context.Context, sessionID string, now, leaseUntil time.Time) (*billing.Entitlement, error) {
	e, err := scanEntitlement(s.pool.QueryRow(ctx, `UPDATE stripe_checkouts SET lease_until = $3
		WHERE session_id = $1 AND (lease_until IS NULL OR lease_until <= $2) RETURNING `+entitlementColumns,
		sessionID, now, leaseUntil))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return e, err
}

// ReleaseEntitlement records what the holder did (applied, and the consumer's plan before
// a grant) and gives the lease back. changed reports that an event moved the entitlement
// since the claim read rev: the holder applies it again.
func (s *Store) ReleaseEntitlement(ctx context.Context, sessionID string, rev int64, applied string, previousPlan *string) (changed bool, err error) {
	var now int64
	err = s.pool.QueryRow(ctx, `UPDATE stripe_checkouts SET applied = $2, previous_plan = $3, lease_until = NULL
		WHERE session_id = $1 RETURNING rev`, sessionID, applied, previousPlan).Scan(&now)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil && now != rev, err
}

// DueEntitlements lists up to limit sessions whose consumer's plan is not what Stripe
// said at now: a grant not applied yet (or to apply again after a cured failure), a plan
// whose grace is over. A session another holds is left to it.
func (s *Store) DueEntitlements(ctx context.Context, now time.Time, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT session_id FROM stripe_checkouts
		WHERE (lease_until IS NULL OR lease_until <= $1) AND (
			(applied = 'granted' AND revoke_at <= $1) OR
			(status = 'paid' AND applied <> 'granted' AND (revoke_at IS NULL OR revoke_at > $1)))
		ORDER BY revoke_at NULLS FIRST, session_id LIMIT $2`, now, limit)
	if err != nil {
		return nil, fmt.Errorf("due entitlements: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// Entitlement returns the state of a checkout: ENotFound for one Tollgate did not make.
func (s *Store) Entitlement(ctx context.Context, sessionID string) (*billing.Entitlement, error) {
	e, err := scanEntitlement(s.pool.QueryRow(ctx, `SELECT `+entitlementColumns+` FROM stripe_checkouts WHERE session_id = $1`, sessionID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, tenants.Errorf(tenants.ENotFound, "no checkout session %q", sessionID)
	}
	return e, err
}

// PaymentGrace is the tenant's grace before a bought plan is taken back (the defaults
// when it set none).
func (s *Store) PaymentGrace(ctx context.Context, tenantID string) (billing.PaymentGrace, error) {
	if !validUUID(tenantID) {
		return billing.PaymentGrace{}, tenants.Errorf(tenants.ENotFound, "no tenant %q", tenantID)
	}
	return paymentGrace(ctx, s.pool, tenantID)
}

func paymentGrace(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, tenantID string) (billing.PaymentGrace, error) {
	g := billing.DefaultPaymentGrace
	err := q.QueryRow(ctx, `SELECT failure_grace_days, end_grace_days FROM stripe_payment_settings WHERE tenant_id = $1`,
		tenantID).Scan(&g.FailureGraceDays, &g.EndGraceDays)
	if errors.Is(err, pgx.ErrNoRows) {
		return billing.DefaultPaymentGrace, nil
	}
	return g, err
}

// SetPaymentGrace sets the tenant's grace: EValidation outside 0–60 days. An event
// already seen keeps the date it set; the grace applies to the events after it.
func (s *Store) SetPaymentGrace(ctx context.Context, tenantID string, g billing.PaymentGrace) error {
	if !validUUID(tenantID) {
		return tenants.Errorf(tenants.ENotFound, "no tenant %q", tenantID)
	}
	if g.FailureGraceDays < 0 || g.FailureGraceDays > billing.MaxGraceDays {
		return tenants.Invalid("failure_grace_days", "must be 0 to %d days", billing.MaxGraceDays)
	}
	if g.EndGraceDays < 0 || g.EndGraceDays > billing.MaxGraceDays {
		return tenants.Invalid("end_grace_days", "must be 0 to %d days", billing.MaxGraceDays)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO stripe_payment_settings (tenant_id, failure_grace_days, end_grace_days)
		VALUES ($1, $2, $3) ON CONFLICT (tenant_id) DO UPDATE SET failure_grace_days = $2, end_grace_days = $3, updated_at = now()`,
		tenantID, g.FailureGraceDays, g.EndGraceDays)
	if err != nil {
		return fmt.Errorf("payment grace: %w", err)
	}
	return nil
}
