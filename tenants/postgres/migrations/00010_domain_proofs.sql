-- Custom domains are claims until their DNS TXT record proves them.
--
-- A host name was unique across all tenants, so whoever uploaded it first held it: a
-- squatter could block its owner. Now any number of tenants may claim a name (each with
-- its own token), each tenant at most once, and at most one claim per name is verified:
-- the partial unique index is what stops two tenants serving one name, whatever races
-- the api's checks lose.
--
-- Domains stored before this migration were never proven, so they start pending, with a
-- token of their own and a check due at once; the edges stop serving them until their
-- owners publish the record.

-- +goose Up
ALTER TABLE domains DROP CONSTRAINT domains_hostname_key;
ALTER TABLE domains
    ADD COLUMN status        text        NOT NULL DEFAULT 'pending'
        CONSTRAINT domains_status_check CHECK (status IN ('pending', 'verified')),
    ADD COLUMN token         text        NOT NULL DEFAULT replace(gen_random_uuid()::text, '-', ''),
    ADD COLUMN verified_at   timestamptz,
    ADD COLUMN checked_at    timestamptz,
    ADD COLUMN next_check_at timestamptz DEFAULT now(),
    ADD COLUMN last_error    text        NOT NULL DEFAULT '',
    ADD COLUMN failures      integer     NOT NULL DEFAULT 0,
    ADD COLUMN pending_since timestamptz NOT NULL DEFAULT now();
-- The store always sets the token; the default only gave each existing row its own.
ALTER TABLE domains ALTER COLUMN token DROP DEFAULT;
CREATE UNIQUE INDEX domains_tenant_hostname_key ON domains (tenant_id, hostname);
CREATE UNIQUE INDEX domains_verified_hostname_key ON domains (hostname) WHERE status = 'verified';
CREATE INDEX domains_next_check_idx ON domains (next_check_at) WHERE next_check_at IS NOT NULL;

-- +goose Down
-- Only one claim per name can survive the global constraint: the verified one, else the
-- oldest.
DELETE FROM domains d USING domains o
WHERE d.hostname = o.hostname AND d.id <> o.id
  AND (o.status = 'verified' AND d.status <> 'verified'
       OR o.status = d.status AND (o.created_at, o.id) < (d.created_at, d.id));
DROP INDEX domains_next_check_idx;
DROP INDEX domains_verified_hostname_key;
DROP INDEX domains_tenant_hostname_key;
ALTER TABLE domains
    DROP COLUMN pending_since,
    DROP COLUMN failures,
    DROP COLUMN last_error,
    DROP COLUMN next_check_at,
    DROP COLUMN checked_at,
    DROP COLUMN verified_at,
    DROP COLUMN token,
    DROP COLUMN status;
ALTER TABLE domains ADD CONSTRAINT domains_hostname_key UNIQUE (hostname);
