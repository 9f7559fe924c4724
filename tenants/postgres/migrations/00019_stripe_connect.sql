-- Stripe Connect accounts proven through Stripe's onboarding (package billing/postgres,
-- connect.go).
--
-- stripe_connect_accounts: the account the platform created for a tenant (POST
-- /v1/accounts) and onboarded through an Account Link, with what Stripe last said of it.
-- Its id came from Stripe, never from the tenant, and belongs to one tenant only.
-- Consumers' checkouts run on it only while charges_enabled.
--
-- stripe_accounts (00016) keeps the ids tenants typed in before: nothing proves a typed id
-- is the tenant's, so they are never copied here and never used for Checkout again; the
-- console shows one as unproven until the tenant connects through Stripe (which deletes
-- it) or removes it. Two tenants may have typed the same id there; only here is an
-- account held.

-- +goose Up
CREATE TABLE stripe_connect_accounts (
    tenant_id         uuid        PRIMARY KEY CONSTRAINT stripe_connect_accounts_tenant_fkey REFERENCES tenants (id) ON DELETE CASCADE,
    account_id        text        NOT NULL CONSTRAINT stripe_connect_accounts_account_key UNIQUE
                      CONSTRAINT stripe_connect_accounts_account_check CHECK (account_id ~ '^acct_[A-Za-z0-9]+$'),
    details_submitted boolean     NOT NULL DEFAULT false,
    charges_enabled   boolean     NOT NULL DEFAULT false,
    checked_at        timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE stripe_connect_accounts;
