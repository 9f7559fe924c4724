-- Stripe end to end (package billing/stripe, billing/postgres stripe.go).
--
-- What Tollgate made in Stripe is remembered here so that each thing is made once: the
-- product and prices of each platform price version, each paying tenant's subscription.
-- What Stripe tells back through webhooks lands here too: invoices, subscription status,
-- completed checkouts. stripe_webhook_events is the dedupe: an event's id is inserted in
-- the transaction that applies it, so a redelivered event inserts nothing and changes
-- nothing.
--
-- Rows about a tenant's billing have no foreign key to tenants (as usage_hourly): a
-- deleted tenant's subscription is still cancelled and its invoices still reported. The
-- connected account and consumer checkouts belong to the tenant and go with it.

-- +goose Up
CREATE TABLE stripe_webhook_events (
    event_id    text        PRIMARY KEY,
    type        text        NOT NULL,
    account     text        NOT NULL DEFAULT '', -- the connected account it came from, if any
    received_at timestamptz NOT NULL DEFAULT now()
);

-- The Stripe objects of one platform price version (prices, 00015), keyed like it and by
-- a fingerprint of its numbers: a version replaced while in effect gets new objects. ''
-- when the version has no such part (no fee, no usage charge).
CREATE TABLE stripe_prices (
    plan           text        NOT NULL,
    effective_from text        NOT NULL CONSTRAINT stripe_prices_from_check CHECK (effective_from ~ '^[0-9]{4}-[0-9]{2}$'),
    fingerprint    text        NOT NULL,
    product_id     text        NOT NULL,
    fee_price_id   text        NOT NULL DEFAULT '',
    usage_price_id text        NOT NULL DEFAULT '',
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (plan, effective_from, fingerprint)
);

-- One row per paying tenant: its current (or last) subscription. generation counts the
-- subscriptions made for the tenant and keys their create requests' Idempotency-Key.
CREATE TABLE stripe_subscriptions (
    tenant_id          uuid        PRIMARY KEY,
    stripe_customer_id text        NOT NULL,
    subscription_id    text        NOT NULL,
    generation         integer     NOT NULL DEFAULT 1,
    plan               text        NOT NULL,
    effective_from     text        NOT NULL,
    fingerprint        text        NOT NULL DEFAULT '',
    status             text        NOT NULL,
    current_period_end timestamptz,
    updated_at         timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX stripe_subscriptions_id_key ON stripe_subscriptions (subscription_id);

CREATE TABLE stripe_invoices (
    invoice_id         text        PRIMARY KEY,
    tenant_id          uuid,       -- null: a customer Tollgate does not know
    stripe_customer_id text        NOT NULL,
    status             text        NOT NULL,
    amount_due         bigint      NOT NULL DEFAULT 0,
    amount_paid        bigint      NOT NULL DEFAULT 0,
    currency           text        NOT NULL DEFAULT '',
    period_start       timestamptz,
    period_end         timestamptz,
    hosted_url         text        NOT NULL DEFAULT '',
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX stripe_invoices_tenant_idx ON stripe_invoices (tenant_id, period_start DESC);

-- A tenant's Stripe Connect account (acct_…): consumers' checkouts are made on it, so
-- the tenant is paid directly.
CREATE TABLE stripe_accounts (
    tenant_id  uuid        PRIMARY KEY CONSTRAINT stripe_accounts_tenant_fkey REFERENCES tenants (id) ON DELETE CASCADE,
    account_id text        NOT NULL CONSTRAINT stripe_accounts_account_check CHECK (account_id ~ '^acct_[A-Za-z0-9]+$'),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Every Checkout session made for a consumer of a tenant. connected_account '' means it
-- was made on the platform's account: the tenant invoices the consumer itself from this
-- record.
CREATE TABLE stripe_checkouts (
    session_id        text        PRIMARY KEY,
    tenant_id         uuid        NOT NULL CONSTRAINT stripe_checkouts_tenant_fkey REFERENCES tenants (id) ON DELETE CASCADE,
    consumer_id       text        NOT NULL,
    plan              text        NOT NULL,
    status            text        NOT NULL DEFAULT 'pending'
                      CONSTRAINT stripe_checkouts_status_check CHECK (status IN ('pending', 'paid', 'expired')),
    amount            bigint      NOT NULL,
    currency          text        NOT NULL,
    connected_account text        NOT NULL DEFAULT '',
    subscription_id   text        NOT NULL DEFAULT '',
    created_at        timestamptz NOT NULL DEFAULT now(),
    completed_at      timestamptz
);
CREATE INDEX stripe_checkouts_tenant_idx ON stripe_checkouts (tenant_id, created_at DESC);

-- +goose Down
DROP TABLE stripe_checkouts;
DROP TABLE stripe_accounts;
DROP TABLE stripe_invoices;
DROP TABLE stripe_subscriptions;
DROP TABLE stripe_prices;
DROP TABLE stripe_webhook_events;
