-- Platform plans: the operator's plans a tenant's `plan` names. Their limits cap the whole
-- tenant (every consumer and route together); the store copies the tenant's platform plan
-- into the tenant's config entry (tenants.Tenant.Limits), and re-emits those entries when
-- a plan changes, so the edges enforce it without reading Postgres.
--
-- limits: {"rate_limit":{"rps"|"rpm","burst"},"quota":{"requests"},"concurrency","mode"}
-- (the jsonb of a tenant's plans, tenants.Plan's limit fields). billing_prices (00002)
-- prices the same names.

-- +goose Up
CREATE TABLE platform_plans (
    name       text        PRIMARY KEY,
    limits     jsonb       NOT NULL,
    version    bigint      NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO platform_plans (name, limits) VALUES
    -- 10 requests/s (bursts of 20), 10,000 a month, 10 in flight.
    ('free',       '{"rate_limit":{"rps":10,"burst":20},"quota":{"requests":10000},"concurrency":10,"mode":"approximate"}'),
    -- 200/s (bursts of 400), 1,000,000 a month, 100 in flight.
    ('pro',        '{"rate_limit":{"rps":200,"burst":400},"quota":{"requests":1000000},"concurrency":100,"mode":"approximate"}'),
    -- 2,000/s (bursts of 4,000), no quota (billed per request), 1,000 in flight.
    ('enterprise', '{"rate_limit":{"rps":2000,"burst":4000},"concurrency":1000,"mode":"approximate"}'),
    -- No limits at all: for tests, `tollgate dev` and tenants the operator trusts.
    ('unlimited',  '{"concurrency":0}');

-- Tenants created before this migration may name plans the table does not have: they
-- get a plan of that name without limits, which is what they had, and the operator can
-- give it limits with PUT /v1/platform/plans/{name}.
INSERT INTO platform_plans (name, limits)
    SELECT DISTINCT plan, '{"concurrency":0}'::jsonb FROM tenants
    ON CONFLICT (name) DO NOTHING;

-- A tenant's plan must exist; a plan in use cannot be deleted.
ALTER TABLE tenants ADD CONSTRAINT tenants_plan_fkey
    FOREIGN KEY (plan) REFERENCES platform_plans (name);
-- A plan's change re-emits the entries of its tenants.
CREATE INDEX tenants_plan_idx ON tenants (plan);

-- +goose Down
DROP INDEX tenants_plan_idx;
ALTER TABLE tenants DROP CONSTRAINT tenants_plan_fkey;
DROP TABLE platform_plans;
