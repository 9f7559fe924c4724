-- Usage metering and billing (package billing, billing/postgres).
--
-- Edges count requests in memory and publish one usage batch a second to JetStream;
-- `tollgate billing` folds each batch into usage_hourly in one transaction that also
-- records the batch id in usage_batches. The primary key of usage_batches is what makes a
-- fold happen exactly once: a redelivered or republished batch inserts nothing there, and
-- the transaction stops before touching the rollups.
--
-- Usage rows have no foreign key to tenants on purpose: the usage of a tenant deleted
-- mid-month is still exported and reconciled, and a batch never fails to fold because the
-- tenant it names is gone. route_id and consumer_id are '' when there is none (a request
-- that matched no route, a route without authentication).

-- +goose Up
CREATE TABLE usage_batches (
    batch_id    text        PRIMARY KEY,   -- <edge id>.<boot id>.<sequence>; also the Nats-Msg-Id
    edge_id     text        NOT NULL,
    records     integer     NOT NULL,
    requests    bigint      NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX usage_batches_received_idx ON usage_batches (received_at);

CREATE TABLE usage_hourly (
    tenant_id    uuid        NOT NULL,
    hour         timestamptz NOT NULL CONSTRAINT usage_hourly_hour_check CHECK (date_trunc('hour', hour) = hour),
    route_id     text        NOT NULL DEFAULT '',
    consumer_id  text        NOT NULL DEFAULT '',
    status_class smallint    NOT NULL CONSTRAINT usage_hourly_class_check CHECK (status_class BETWEEN 0 AND 5),
    requests     bigint      NOT NULL DEFAULT 0,
    billable     bigint      NOT NULL DEFAULT 0,
    bytes_in     bigint      NOT NULL DEFAULT 0,
    bytes_out    bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, hour, route_id, consumer_id, status_class)
);
-- Exports and reconciliation scan one month of every tenant.
CREATE INDEX usage_hourly_hour_idx ON usage_hourly (hour);

-- Prices of the platform plans (a tenant's `plan`; their limits are in platform_plans,
-- 00003). A tenant whose plan has no price here is priced as 'free' (billing.FallbackPlan).
--   amount = ceil(max(0, billable - included_requests) * unit_price / unit_requests)
-- in integer minor units of currency (cents for usd). With per_consumer the allowance and
-- the amount are per consumer of the tenant, and the export has one row per consumer.
CREATE TABLE billing_prices (
    plan              text        PRIMARY KEY,
    currency          text        NOT NULL CONSTRAINT billing_prices_currency_check CHECK (currency ~ '^[a-z]{3}$'),
    included_requests bigint      NOT NULL CONSTRAINT billing_prices_included_check CHECK (included_requests >= 0),
    unit_price        bigint      NOT NULL CONSTRAINT billing_prices_unit_price_check CHECK (unit_price >= 0),
    unit_requests     bigint      NOT NULL CONSTRAINT billing_prices_unit_requests_check CHECK (unit_requests > 0),
    per_consumer      boolean     NOT NULL DEFAULT false,
    updated_at        timestamptz NOT NULL DEFAULT now()
);
INSERT INTO billing_prices (plan, currency, included_requests, unit_price, unit_requests, per_consumer) VALUES
    ('free',       'usd',   10000,  0, 1000, false), -- allowance only; the quota stops use beyond it
    ('pro',        'usd', 1000000, 20, 1000, false), -- $0.20 per 1,000 billable requests over 1M
    ('enterprise', 'usd',       0, 10, 1000, true);  -- $0.10 per 1,000, every request, per consumer

-- A tenant billed through Stripe: created when billing is enabled for it.
CREATE TABLE billing_customers (
    tenant_id          uuid        PRIMARY KEY,
    stripe_customer_id text        NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now()
);

-- Every Billing Meter event Tollgate sends to Stripe, one row per (tenant, hour, revision).
-- Revision 1 carries the hour's billable requests when it is first pushed; a later
-- revision carries only what folded into the hour after that (late batches). identifier
-- is the meter event's identifier, derived from the row's key, so a retry sends the same
-- one and Stripe never counts it twice.
CREATE TABLE stripe_pushes (
    tenant_id   uuid        NOT NULL,
    hour        timestamptz NOT NULL,
    revision    integer     NOT NULL,
    identifier  text        NOT NULL CONSTRAINT stripe_pushes_identifier_key UNIQUE,
    stripe_customer_id text NOT NULL,
    quantity    bigint      NOT NULL,
    status      text        NOT NULL DEFAULT 'pending'
                CONSTRAINT stripe_pushes_status_check CHECK (status IN ('pending', 'pushed', 'failed')),
    attempts    integer     NOT NULL DEFAULT 0,
    last_error  text        NOT NULL DEFAULT '',
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    created_at  timestamptz NOT NULL DEFAULT now(),
    pushed_at   timestamptz,
    PRIMARY KEY (tenant_id, hour, revision)
);
CREATE INDEX stripe_pushes_due_idx ON stripe_pushes (next_attempt_at) WHERE status = 'pending';

-- +goose Down
DROP TABLE stripe_pushes;
DROP TABLE billing_customers;
DROP TABLE billing_prices;
DROP TABLE usage_hourly;
DROP TABLE usage_batches;
