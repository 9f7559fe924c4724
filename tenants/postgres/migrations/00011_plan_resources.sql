-- Resource limits of the platform plans: how many routes, consumers, keys per consumer,
-- consumer plans, custom domains, JWT issuers and policy entries (rules and role links
-- together) a tenant on the plan may keep, and how many bytes of each edge's response
-- cache its answers may hold (tenants.ResourceLimits). The store checks the counts when an
-- object is saved, under a lock of the tenant row; the edge reads cache_bytes from the
-- tenant's config entry.
--
-- Plans that existed before (the operator's own, and those 00003 made for old tenants'
-- plan names) get the ceilings, which is closest to the "no limit" they had.

-- +goose Up
ALTER TABLE platform_plans
    ADD COLUMN routes            integer NOT NULL DEFAULT 50000   CHECK (routes >= 0),
    ADD COLUMN consumers         integer NOT NULL DEFAULT 1000000 CHECK (consumers >= 0),
    ADD COLUMN keys_per_consumer integer NOT NULL DEFAULT 100     CHECK (keys_per_consumer >= 0),
    ADD COLUMN plans             integer NOT NULL DEFAULT 1000    CHECK (plans >= 0),
    ADD COLUMN domains           integer NOT NULL DEFAULT 1000    CHECK (domains >= 0),
    ADD COLUMN jwt_issuers       integer NOT NULL DEFAULT 32      CHECK (jwt_issuers >= 0),
    ADD COLUMN policy_rules      integer NOT NULL DEFAULT 11000   CHECK (policy_rules >= 0),
    ADD COLUMN cache_bytes       bigint  NOT NULL DEFAULT 1099511627776 CHECK (cache_bytes >= 0);

-- free: a trial: 10 routes, 100 consumers with 2 keys each (one to rotate), 3 consumer
-- plans, 1 custom domain, 2 issuers, 100 policy entries, 1 MiB of each edge's cache.
UPDATE platform_plans SET routes = 10, consumers = 100, keys_per_consumer = 2, plans = 3,
    domains = 1, jwt_issuers = 2, policy_rules = 100, cache_bytes = 1048576 WHERE name = 'free';
-- pro: 500 routes, 10,000 consumers, 5 keys each, 20 plans, 10 domains, 8 issuers,
-- 1,000 policy entries, 32 MiB of cache.
UPDATE platform_plans SET routes = 500, consumers = 10000, keys_per_consumer = 5, plans = 20,
    domains = 10, jwt_issuers = 8, policy_rules = 1000, cache_bytes = 33554432 WHERE name = 'pro';
-- enterprise: 10,000 routes, 100,000 consumers, 10 keys each, 100 plans, 100 domains
-- (the old fixed bound), 32 issuers, 11,000 policy entries, 128 MiB of cache.
UPDATE platform_plans SET routes = 10000, consumers = 100000, keys_per_consumer = 10, plans = 100,
    domains = 100, jwt_issuers = 32, policy_rules = 11000, cache_bytes = 134217728 WHERE name = 'enterprise';
-- unlimited: the ceilings (what one edge can hold for one tenant), but 1 GiB of cache:
-- more than an edge's default budget, so only the edge's budget and the fair sharing of it
-- bound the tenant.
UPDATE platform_plans SET cache_bytes = 1073741824 WHERE name = 'unlimited';

-- The store writes every column; a default would hide a forgotten one.
ALTER TABLE platform_plans
    ALTER COLUMN routes DROP DEFAULT, ALTER COLUMN consumers DROP DEFAULT,
    ALTER COLUMN keys_per_consumer DROP DEFAULT, ALTER COLUMN plans DROP DEFAULT,
    ALTER COLUMN domains DROP DEFAULT, ALTER COLUMN jwt_issuers DROP DEFAULT,
    ALTER COLUMN policy_rules DROP DEFAULT, ALTER COLUMN cache_bytes DROP DEFAULT;

-- +goose Down
ALTER TABLE platform_plans
    DROP COLUMN routes, DROP COLUMN consumers, DROP COLUMN keys_per_consumer, DROP COLUMN plans,
    DROP COLUMN domains, DROP COLUMN jwt_issuers, DROP COLUMN policy_rules, DROP COLUMN cache_bytes;
