-- How many objects of each kind a tenant keeps, so a creation checks its platform plan's
-- limit without counting the tenant's rows (which made every creation in a large tenant
-- cost as much as the tenant is large). A tenant's counts are spread over rows of its
-- own (stripes, one per writing connection, made when first written): concurrent
-- creations in one tenant add to different rows, so none waits for another's commit;
-- the tenant's count is the sum of its stripes. The store keeps them in the transaction
-- that inserts or deletes the objects; deleting a tenant, or a consumer, deletes its
-- counts with it.

-- +goose Up
CREATE TABLE tenant_counts (
    tenant_id   uuid     NOT NULL CONSTRAINT tenant_counts_tenant_fkey REFERENCES tenants (id) ON DELETE CASCADE,
    stripe      smallint NOT NULL,
    routes      bigint   NOT NULL DEFAULT 0,
    consumers   bigint   NOT NULL DEFAULT 0,
    plans       bigint   NOT NULL DEFAULT 0,
    jwt_issuers bigint   NOT NULL DEFAULT 0,
    domains     bigint   NOT NULL DEFAULT 0,
    functions   bigint   NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, stripe)
);

INSERT INTO tenant_counts (tenant_id, stripe, routes, consumers, plans, jwt_issuers, domains, functions)
SELECT t.id, 0,
    (SELECT count(*) FROM routes x WHERE x.tenant_id = t.id),
    (SELECT count(*) FROM consumers x WHERE x.tenant_id = t.id),
    (SELECT count(*) FROM plans x WHERE x.tenant_id = t.id),
    (SELECT count(*) FROM jwt_issuers x WHERE x.tenant_id = t.id),
    (SELECT count(*) FROM domains x WHERE x.tenant_id = t.id),
    (SELECT count(*) FROM functions x WHERE x.tenant_id = t.id)
FROM tenants t;

-- A consumer's keys: one row per consumer, locked by each key creation (keys of one
-- consumer are few and rarely made at once).
CREATE TABLE consumer_key_counts (
    tenant_id   uuid   NOT NULL,
    consumer_id uuid   NOT NULL,
    keys        bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, consumer_id),
    CONSTRAINT consumer_key_counts_consumer_fkey FOREIGN KEY (tenant_id, consumer_id)
        REFERENCES consumers (tenant_id, id) ON DELETE CASCADE
);

INSERT INTO consumer_key_counts (tenant_id, consumer_id, keys)
SELECT tenant_id, consumer_id, count(*) FROM keys GROUP BY tenant_id, consumer_id;

-- +goose Down
DROP TABLE consumer_key_counts;
DROP TABLE tenant_counts;
