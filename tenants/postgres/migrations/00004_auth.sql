-- JWT issuers and access policies of tenants.
--
-- An issuer's settings (audiences, algorithms, keys or jwks_url or the HS256 secret,
-- claims, leeway) are one jsonb value, read and written whole like a route's spec; only
-- "issuer" is a column, since it is unique per tenant. A tenant has at most one policy.
-- The numbering leaves 00003 to the platform plans.

-- +goose Up
CREATE TABLE jwt_issuers (
    tenant_id  uuid        NOT NULL CONSTRAINT jwt_issuers_tenant_fkey REFERENCES tenants (id) ON DELETE CASCADE,
    id         uuid        NOT NULL,
    issuer     text        NOT NULL,
    spec       jsonb       NOT NULL,
    version    bigint      NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    CONSTRAINT jwt_issuers_issuer_key UNIQUE (tenant_id, issuer)
);

CREATE TABLE policies (
    tenant_id  uuid        PRIMARY KEY CONSTRAINT policies_tenant_fkey REFERENCES tenants (id) ON DELETE CASCADE,
    -- {"rules":[[subject, pattern, action(, effect)]...],"roles":[[member, role]...]}
    spec       jsonb       NOT NULL,
    version    bigint      NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE policies;
DROP TABLE jwt_issuers;
