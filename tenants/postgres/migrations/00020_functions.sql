-- Tenants' functions: WebAssembly modules (proxy-wasm filters) a tenant uploads by name
-- (package tenants/postgres, function.go).
--
-- function_modules: each distinct module a tenant keeps, by the hex sha256 of its bytes;
-- the bytes also go to the NATS object store the edges fetch from, which the api fills
-- again from here when it lost one.
-- functions: a tenant's function names and the current version of each.
-- function_versions: every upload under a name, numbered from 1; a route names the version
-- it runs by sha256 in its spec (spec->'functions'), so uploading a new version moves no
-- route until it is saved again.
--
-- The platform plans get the function limits of tenants.ResourceLimits: how many function
-- names a tenant keeps, its largest module, the guest time per callback (0: the edge's
-- default) and the guest runs at once per edge (0: the edge's default).

-- +goose Up
CREATE TABLE function_modules (
    tenant_id  uuid        NOT NULL CONSTRAINT function_modules_tenant_fkey REFERENCES tenants (id) ON DELETE CASCADE,
    sha256     text        NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    size       bigint      NOT NULL CHECK (size >= 0),
    module     bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, sha256)
);
CREATE INDEX function_modules_sha256 ON function_modules (sha256);

CREATE TABLE functions (
    tenant_id  uuid        NOT NULL CONSTRAINT functions_tenant_fkey REFERENCES tenants (id) ON DELETE CASCADE,
    name       text        NOT NULL,
    version    bigint      NOT NULL CHECK (version >= 1),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, name)
);

CREATE TABLE function_versions (
    tenant_id  uuid        NOT NULL,
    name       text        NOT NULL,
    version    bigint      NOT NULL CHECK (version >= 1),
    sha256     text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    created_by text        NOT NULL DEFAULT '',
    PRIMARY KEY (tenant_id, name, version),
    CONSTRAINT function_versions_function_fkey FOREIGN KEY (tenant_id, name)
        REFERENCES functions (tenant_id, name) ON DELETE CASCADE,
    CONSTRAINT function_versions_module_fkey FOREIGN KEY (tenant_id, sha256)
        REFERENCES function_modules (tenant_id, sha256)
);
CREATE INDEX function_versions_sha256 ON function_versions (tenant_id, sha256);

ALTER TABLE platform_plans
    ADD COLUMN functions            integer NOT NULL DEFAULT 1000     CHECK (functions >= 0),
    ADD COLUMN function_bytes       integer NOT NULL DEFAULT 16777216 CHECK (function_bytes >= 0),
    ADD COLUMN function_timeout_ms  integer NOT NULL DEFAULT 100      CHECK (function_timeout_ms >= 0),
    ADD COLUMN function_concurrency integer NOT NULL DEFAULT 256      CHECK (function_concurrency >= 0);

-- free: 3 functions of up to 1 MiB, 5 ms per callback, 2 runs at once per edge.
UPDATE platform_plans SET functions = 3, function_bytes = 1048576, function_timeout_ms = 5,
    function_concurrency = 2 WHERE name = 'free';
-- pro: 25 functions of up to 4 MiB, 10 ms, 8 at once.
UPDATE platform_plans SET functions = 25, function_bytes = 4194304, function_timeout_ms = 10,
    function_concurrency = 8 WHERE name = 'pro';
-- enterprise: 200 functions of up to 16 MiB, 50 ms, 32 at once.
UPDATE platform_plans SET functions = 200, function_bytes = 16777216, function_timeout_ms = 50,
    function_concurrency = 32 WHERE name = 'enterprise';
-- unlimited keeps the ceilings.

-- The store writes every column; a default would hide a forgotten one.
ALTER TABLE platform_plans
    ALTER COLUMN functions DROP DEFAULT, ALTER COLUMN function_bytes DROP DEFAULT,
    ALTER COLUMN function_timeout_ms DROP DEFAULT, ALTER COLUMN function_concurrency DROP DEFAULT;

-- +goose Down
ALTER TABLE platform_plans
    DROP COLUMN functions, DROP COLUMN function_bytes, DROP COLUMN function_timeout_ms,
    DROP COLUMN function_concurrency;
DROP TABLE function_versions;
DROP TABLE functions;
DROP TABLE function_modules;
