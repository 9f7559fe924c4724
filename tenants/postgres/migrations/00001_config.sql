-- Tenants' configuration and the outbox that fans it out to the edges.
--
-- Every object table is keyed (tenant_id, id) so that a reference between objects (a key's
-- consumer, a consumer's plan, a path's route) can only point inside the same tenant. Ids
-- are UUIDv7: id order is creation order, which list pagination relies on.
-- Constraint names are matched by the Go code to turn violations into precise errors.

-- +goose Up
CREATE TABLE tenants (
    id         uuid        PRIMARY KEY,
    slug       text        NOT NULL CONSTRAINT tenants_slug_key UNIQUE,
    name       text        NOT NULL,
    plan       text        NOT NULL,
    version    bigint      NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE plans (
    tenant_id  uuid        NOT NULL CONSTRAINT plans_tenant_fkey REFERENCES tenants (id) ON DELETE CASCADE,
    id         uuid        NOT NULL,
    name       text        NOT NULL,
    -- {"rate_limit":{"rps","burst"},"quota":{"requests"},"concurrency"}
    limits     jsonb       NOT NULL,
    version    bigint      NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    CONSTRAINT plans_name_key UNIQUE (tenant_id, name)
);

CREATE TABLE routes (
    tenant_id  uuid        NOT NULL CONSTRAINT routes_tenant_fkey REFERENCES tenants (id) ON DELETE CASCADE,
    id         uuid        NOT NULL,
    name       text        NOT NULL,
    -- paths, methods, upstream, auth, policy, rate_limit, strip_prefix, max_body_bytes,
    -- connect_timeout_ms, timeout_ms: read and written whole, never queried inside.
    spec       jsonb       NOT NULL,
    version    bigint      NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    CONSTRAINT routes_name_key UNIQUE (tenant_id, name)
);

-- One row per (path, method) a route claims; method '*' when the route lists no methods.
-- The unique constraint is what stops two routes of a tenant claiming the same path+method.
CREATE TABLE route_paths (
    tenant_id uuid NOT NULL,
    route_id  uuid NOT NULL,
    path      text NOT NULL,
    method    text NOT NULL,
    PRIMARY KEY (tenant_id, route_id, path, method),
    CONSTRAINT route_paths_route_fkey FOREIGN KEY (tenant_id, route_id)
        REFERENCES routes (tenant_id, id) ON DELETE CASCADE,
    CONSTRAINT route_paths_path_key UNIQUE (tenant_id, path, method)
);

CREATE TABLE consumers (
    tenant_id  uuid        NOT NULL CONSTRAINT consumers_tenant_fkey REFERENCES tenants (id) ON DELETE CASCADE,
    id         uuid        NOT NULL,
    name       text        NOT NULL,
    plan       text,       -- a plan name of the same tenant, or NULL
    version    bigint      NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    CONSTRAINT consumers_name_key UNIQUE (tenant_id, name),
    -- NO ACTION: a plan in use can be neither deleted nor renamed (checked at statement
    -- end, so deleting a whole tenant still cascades through both tables).
    CONSTRAINT consumers_plan_fkey FOREIGN KEY (tenant_id, plan) REFERENCES plans (tenant_id, name)
);
CREATE INDEX consumers_plan_idx ON consumers (tenant_id, plan) WHERE plan IS NOT NULL;

CREATE TABLE keys (
    tenant_id   uuid        NOT NULL,
    id          uuid        NOT NULL,
    consumer_id uuid        NOT NULL,
    prefix      text        NOT NULL,
    hash        text        NOT NULL CONSTRAINT keys_hash_key UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    CONSTRAINT keys_consumer_fkey FOREIGN KEY (tenant_id, consumer_id)
        REFERENCES consumers (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX keys_consumer_idx ON keys (tenant_id, consumer_id, id);

CREATE TABLE tokens (
    tenant_id  uuid        NOT NULL CONSTRAINT tokens_tenant_fkey REFERENCES tenants (id) ON DELETE CASCADE,
    id         uuid        NOT NULL,
    name       text        NOT NULL,
    role       text        NOT NULL,
    prefix     text        NOT NULL,
    hash       text        NOT NULL CONSTRAINT tokens_hash_key UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);

-- The outbox: one row per KV entry change, written in the transaction of the change. id is
-- the entry's Rev. value is the JSON of a tenants.Entry, or NULL for a delete.
CREATE SEQUENCE outbox_id_seq AS bigint;
CREATE TABLE outbox (
    id         bigint      PRIMARY KEY DEFAULT nextval('outbox_id_seq'),
    tenant_id  uuid        NOT NULL, -- no foreign key: a deleted tenant's deletes still go out
    key        text        NOT NULL,
    value      bytea,
    created_at timestamptz NOT NULL DEFAULT now(),
    sent_at    timestamptz
);
ALTER SEQUENCE outbox_id_seq OWNED BY outbox.id;
CREATE INDEX outbox_unsent_idx ON outbox (id) WHERE sent_at IS NULL;
CREATE INDEX outbox_sent_idx ON outbox (sent_at) WHERE sent_at IS NOT NULL;

-- +goose Down
DROP TABLE outbox;
DROP TABLE tokens;
DROP TABLE keys;
DROP TABLE consumers;
DROP TABLE route_paths;
DROP TABLE routes;
DROP TABLE plans;
DROP TABLE tenants;
