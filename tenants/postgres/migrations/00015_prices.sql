-- Prices versioned by month, and the platform plan each tenant was on over time
-- (package billing, billing/postgres/prices.go).
--
-- A price version applies from its month (effective_from, the 1st of a month) to the
-- month before the next version of the same plan, so a change of price never reaches a
-- month already begun. tenant_id NULL is the platform's plans (what a tenant's `plan`
-- costs the tenant); a tenant id is that tenant's consumer plans (what its consumers'
-- plans cost them). A plan without a version in effect for a month is exported as
-- unpriced for it, never priced with another plan's numbers.
--   amount = monthly_fee + ceil(max(0, billable - included_requests) * unit_price / unit_requests)
-- in integer minor units of currency.
--
-- tenant_plan_history is the plan of each tenant from `since` on, written by a trigger
-- whenever a tenant is created or its plan changes, so the export of a past month prices
-- the plan the tenant was on at that month's end, and later plan changes leave it alone.
-- It has no foreign key to tenants: a deleted tenant's past months still export.
--
-- Today's billing_prices rows become versions in effect since forever (1970-01), and
-- today's tenants are on their plan since forever.

-- +goose Up
CREATE TABLE prices (
    tenant_id         uuid        CONSTRAINT prices_tenant_fkey REFERENCES tenants (id) ON DELETE CASCADE,
    plan              text        NOT NULL,
    effective_from    date        NOT NULL
                      CONSTRAINT prices_effective_from_check CHECK (date_trunc('month', effective_from)::date = effective_from),
    currency          text        NOT NULL CONSTRAINT prices_currency_check CHECK (currency ~ '^[a-z]{3}$'),
    monthly_fee       bigint      NOT NULL DEFAULT 0 CONSTRAINT prices_monthly_fee_check CHECK (monthly_fee >= 0),
    included_requests bigint      NOT NULL CONSTRAINT prices_included_check CHECK (included_requests >= 0),
    unit_price        bigint      NOT NULL CONSTRAINT prices_unit_price_check CHECK (unit_price >= 0),
    unit_requests     bigint      NOT NULL CONSTRAINT prices_unit_requests_check CHECK (unit_requests > 0),
    per_consumer      boolean     NOT NULL DEFAULT false
                      CONSTRAINT prices_per_consumer_check CHECK (tenant_id IS NULL OR NOT per_consumer),
    created_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT prices_key UNIQUE NULLS NOT DISTINCT (tenant_id, plan, effective_from)
);

INSERT INTO prices (tenant_id, plan, effective_from, currency, included_requests, unit_price, unit_requests, per_consumer)
    SELECT NULL, plan, DATE '1970-01-01', currency, included_requests, unit_price, unit_requests, per_consumer
    FROM billing_prices;
DROP TABLE billing_prices;

CREATE TABLE tenant_plan_history (
    tenant_id uuid        NOT NULL,
    since     timestamptz NOT NULL,
    plan      text        NOT NULL,
    PRIMARY KEY (tenant_id, since)
);

INSERT INTO tenant_plan_history (tenant_id, since, plan)
    SELECT id, '-infinity', plan FROM tenants;

-- +goose StatementBegin
CREATE FUNCTION tenant_plan_history_record() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Two changes in one transaction share now(): the last one is the plan from then on.
    INSERT INTO tenant_plan_history (tenant_id, since, plan) VALUES (NEW.id, now(), NEW.plan)
        ON CONFLICT (tenant_id, since) DO UPDATE SET plan = EXCLUDED.plan;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER tenants_plan_history AFTER INSERT OR UPDATE OF plan ON tenants
    FOR EACH ROW EXECUTE FUNCTION tenant_plan_history_record();

-- +goose Down
DROP TRIGGER tenants_plan_history ON tenants;
DROP FUNCTION tenant_plan_history_record();
DROP TABLE tenant_plan_history;

CREATE TABLE billing_prices (
    plan              text        PRIMARY KEY,
    currency          text        NOT NULL CONSTRAINT billing_prices_currency_check CHECK (currency ~ '^[a-z]{3}$'),
    included_requests bigint      NOT NULL CONSTRAINT billing_prices_included_check CHECK (included_requests >= 0),
    unit_price        bigint      NOT NULL CONSTRAINT billing_prices_unit_price_check CHECK (unit_price >= 0),
    unit_requests     bigint      NOT NULL CONSTRAINT billing_prices_unit_requests_check CHECK (unit_requests > 0),
    per_consumer      boolean     NOT NULL DEFAULT false,
    updated_at        timestamptz NOT NULL DEFAULT now()
);
-- Each platform plan's latest version is the price it had.
INSERT INTO billing_prices (plan, currency, included_requests, unit_price, unit_requests, per_consumer)
    SELECT DISTINCT ON (plan) plan, currency, included_requests, unit_price, unit_requests, per_consumer
    FROM prices WHERE tenant_id IS NULL
    ORDER BY plan, effective_from DESC;
DROP TABLE prices;
