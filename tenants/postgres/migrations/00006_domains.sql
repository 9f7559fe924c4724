-- Tenants' custom domains and their certificates, for TLS.
--
-- A host name belongs to at most one tenant: the constraint is global, not per tenant,
-- because the edge finds the tenant by the host name alone. The private key is stored
-- (the edges terminate TLS with it, through the domain's config entry); the api never
-- returns it.

-- +goose Up
CREATE TABLE domains (
    tenant_id       uuid        NOT NULL CONSTRAINT domains_tenant_fkey REFERENCES tenants (id) ON DELETE CASCADE,
    id              uuid        NOT NULL,
    hostname        text        NOT NULL CONSTRAINT domains_hostname_key UNIQUE,
    certificate_pem text        NOT NULL,
    private_key_pem text        NOT NULL,
    not_after       timestamptz NOT NULL,
    version         bigint      NOT NULL DEFAULT 1,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);

-- +goose Down
DROP TABLE domains;
