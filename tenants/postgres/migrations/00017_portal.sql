-- Developer portals (package tenants/postgres, portal.go).
--
-- portal_settings: one row per tenant that saved its portal's settings; domain_id names
-- one of the tenant's domains (the portal also answers on its host name while it is
-- verified) and goes back to NULL when that domain is deleted.
-- api_docs: the OpenAPI document a tenant last imported its routes from.
-- portal_accounts: the tenant's consumers who signed up on its portal; an address has at
-- most one account per tenant (case-folded before it is stored). consumer_id is set once
-- the address is verified and the consumer created; deleting the consumer keeps the
-- account, which then acts as nobody until a new consumer is made for it.
-- portal_sessions and portal_tokens keep SHA-256 hashes of cookie values and mailed
-- tokens, never the values; flash is a one-time message sealed with the cookie's value.

-- +goose Up
CREATE TABLE portal_settings (
    tenant_id     uuid        PRIMARY KEY CONSTRAINT portal_settings_tenant_fkey REFERENCES tenants (id) ON DELETE CASCADE,
    enabled       boolean     NOT NULL DEFAULT false,
    display_name  text        NOT NULL DEFAULT '',
    logo          text        NOT NULL DEFAULT '' CONSTRAINT portal_settings_logo_check CHECK (octet_length(logo) <= 90000),
    primary_color text        NOT NULL DEFAULT '',
    accent_color  text        NOT NULL DEFAULT '',
    domain_id     uuid,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT portal_settings_domain_fkey FOREIGN KEY (tenant_id, domain_id)
        REFERENCES domains (tenant_id, id) ON DELETE SET NULL (domain_id)
);

CREATE TABLE api_docs (
    tenant_id  uuid        PRIMARY KEY CONSTRAINT api_docs_tenant_fkey REFERENCES tenants (id) ON DELETE CASCADE,
    document   bytea       NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE portal_accounts (
    tenant_id      uuid        NOT NULL CONSTRAINT portal_accounts_tenant_fkey REFERENCES tenants (id) ON DELETE CASCADE,
    id             uuid        NOT NULL,
    email          text        NOT NULL,
    password_hash  text        NOT NULL,
    email_verified boolean     NOT NULL DEFAULT false,
    consumer_id    uuid,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    CONSTRAINT portal_accounts_email_key UNIQUE (tenant_id, email),
    CONSTRAINT portal_accounts_consumer_fkey FOREIGN KEY (tenant_id, consumer_id)
        REFERENCES consumers (tenant_id, id) ON DELETE SET NULL (consumer_id)
);

CREATE TABLE portal_sessions (
    hash       text        PRIMARY KEY,
    tenant_id  uuid        NOT NULL,
    account_id uuid        NOT NULL,
    csrf       text        NOT NULL,
    flash      text        NOT NULL DEFAULT '',
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT portal_sessions_account_fkey FOREIGN KEY (tenant_id, account_id)
        REFERENCES portal_accounts (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX portal_sessions_account_idx ON portal_sessions (tenant_id, account_id);
CREATE INDEX portal_sessions_expires_idx ON portal_sessions (expires_at);

CREATE TABLE portal_tokens (
    hash       text        PRIMARY KEY,
    tenant_id  uuid        NOT NULL,
    account_id uuid        NOT NULL,
    purpose    text        NOT NULL CONSTRAINT portal_tokens_purpose_check CHECK (purpose IN ('verify', 'reset')),
    expires_at timestamptz NOT NULL,
    used_at    timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT portal_tokens_account_fkey FOREIGN KEY (tenant_id, account_id)
        REFERENCES portal_accounts (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX portal_tokens_account_idx ON portal_tokens (tenant_id, account_id);

-- +goose Down
DROP TABLE portal_tokens;
DROP TABLE portal_sessions;
DROP TABLE portal_accounts;
DROP TABLE api_docs;
DROP TABLE portal_settings;
