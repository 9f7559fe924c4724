-- Consumer plans that follow Stripe's money (package billing/stripe webhook.go and
-- entitlements.go, billing/postgres stripe.go), and amounts Stripe can charge.
--
-- A checkout's plan is granted only when Stripe says it is paid, and taken back when a
-- payment fails past the tenant's grace or the subscription ends. What Stripe said and
-- what Tollgate did about it are kept apart on each stripe_checkouts row:
--   status        what Stripe said of the purchase: pending (made, or completed unpaid),
--                 paid, failed (its delayed payment failed), expired, ended (the
--                 subscription is over);
--   good_at/bad_at the `created` of the newest event that said the purchase is in good
--                 standing (paid) or not (a failed payment, an end): an older event than
--                 the newest of the other kind is stale and changes nothing, since Stripe
--                 delivers out of order;
--   revoke_at     when the plan is taken back unless a payment arrives first (NULL: not
--                 due); revoke_reason says why (payment_failed can be cured by a later
--                 payment, ended cannot);
--   applied       what Tollgate last did to the consumer: '' nothing yet, granted, revoked;
--   previous_plan the consumer's plan when this one was granted, which it goes back to;
--   rev           bumped by every change of what Stripe said, so the one applying a
--                 change (lease_until, held a few seconds) sees that it changed meanwhile.
--
-- stripe_payment_settings is each tenant's grace before a plan is taken back, in days;
-- a tenant without a row has the defaults (3 after a failed payment, 0 after an end).
--
-- Stripe refuses a unit amount over 99,999,999 minor units; so does Tollgate, and bills
-- are computed with checked arithmetic. The checks are NOT VALID so a database that
-- already holds a larger price migrates: the export reports such a bill as an error.

-- +goose Up
ALTER TABLE stripe_checkouts DROP CONSTRAINT stripe_checkouts_status_check;
ALTER TABLE stripe_checkouts ADD CONSTRAINT stripe_checkouts_status_check
    CHECK (status IN ('pending', 'paid', 'failed', 'expired', 'ended'));
ALTER TABLE stripe_checkouts
    ADD COLUMN good_at       timestamptz,
    ADD COLUMN bad_at        timestamptz,
    ADD COLUMN revoke_at     timestamptz,
    ADD COLUMN revoke_reason text        NOT NULL DEFAULT ''
               CONSTRAINT stripe_checkouts_revoke_reason_check CHECK (revoke_reason IN ('', 'payment_failed', 'ended')),
    ADD COLUMN applied       text        NOT NULL DEFAULT ''
               CONSTRAINT stripe_checkouts_applied_check CHECK (applied IN ('', 'granted', 'revoked')),
    ADD COLUMN previous_plan text,
    ADD COLUMN rev           bigint      NOT NULL DEFAULT 0,
    ADD COLUMN lease_until   timestamptz;
-- Checkouts completed before this migration were granted on completion.
UPDATE stripe_checkouts SET applied = 'granted', good_at = completed_at WHERE status = 'paid';
CREATE INDEX stripe_checkouts_subscription_idx ON stripe_checkouts (subscription_id) WHERE subscription_id <> '';
CREATE INDEX stripe_checkouts_due_idx ON stripe_checkouts (revoke_at) WHERE applied = 'granted' AND revoke_at IS NOT NULL;

CREATE TABLE stripe_payment_settings (
    tenant_id          uuid        PRIMARY KEY CONSTRAINT stripe_payment_settings_tenant_fkey REFERENCES tenants (id) ON DELETE CASCADE,
    failure_grace_days integer     NOT NULL DEFAULT 3
                       CONSTRAINT stripe_payment_settings_failure_check CHECK (failure_grace_days BETWEEN 0 AND 60),
    end_grace_days     integer     NOT NULL DEFAULT 0
                       CONSTRAINT stripe_payment_settings_end_check CHECK (end_grace_days BETWEEN 0 AND 60),
    updated_at         timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE prices ADD CONSTRAINT prices_monthly_fee_max CHECK (monthly_fee <= 99999999) NOT VALID;
ALTER TABLE prices ADD CONSTRAINT prices_unit_price_max CHECK (unit_price <= 99999999) NOT VALID;

-- +goose Down
ALTER TABLE prices DROP CONSTRAINT prices_unit_price_max;
ALTER TABLE prices DROP CONSTRAINT prices_monthly_fee_max;
DROP TABLE stripe_payment_settings;
DROP INDEX stripe_checkouts_due_idx;
DROP INDEX stripe_checkouts_subscription_idx;
ALTER TABLE stripe_checkouts
    DROP COLUMN lease_until, DROP COLUMN rev, DROP COLUMN previous_plan, DROP COLUMN applied,
    DROP COLUMN revoke_reason, DROP COLUMN revoke_at, DROP COLUMN bad_at, DROP COLUMN good_at;
UPDATE stripe_checkouts SET status = 'pending' WHERE status IN ('failed', 'ended');
ALTER TABLE stripe_checkouts DROP CONSTRAINT stripe_checkouts_status_check;
ALTER TABLE stripe_checkouts ADD CONSTRAINT stripe_checkouts_status_check CHECK (status IN ('pending', 'paid', 'expired'));
