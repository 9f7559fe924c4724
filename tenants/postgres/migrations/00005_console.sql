-- Console users, their memberships and sessions, and the audit log.
--
-- Only hashes are stored: bcrypt for passwords, SHA-256 for session ids (the id itself
-- lives only in the browser's cookie). Every membership, session and audit row is reached
-- through its tenant or its user; nothing here is published to the edges.

-- +goose Up
CREATE TABLE users (
    id            uuid        PRIMARY KEY,
    email         text        NOT NULL CONSTRAINT users_email_key UNIQUE,
    password_hash text        NOT NULL,
    platform_role text        NOT NULL DEFAULT '' CONSTRAINT users_platform_role_check CHECK (platform_role IN ('', 'operator', 'finance')),
    created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE memberships (
    tenant_id  uuid        NOT NULL CONSTRAINT memberships_tenant_fkey REFERENCES tenants (id) ON DELETE CASCADE,
    user_id    uuid        NOT NULL CONSTRAINT memberships_user_fkey REFERENCES users (id) ON DELETE CASCADE,
    role       text        NOT NULL CONSTRAINT memberships_role_check CHECK (role IN ('owner', 'admin', 'developer', 'viewer')),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, user_id)
);
CREATE INDEX memberships_user_idx ON memberships (user_id);

CREATE TABLE sessions (
    hash       text        PRIMARY KEY,
    user_id    uuid        NOT NULL CONSTRAINT sessions_user_fkey REFERENCES users (id) ON DELETE CASCADE,
    csrf       text        NOT NULL,
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sessions_expires_idx ON sessions (expires_at);

-- No foreign key to tenants: the trail of a deleted tenant is kept.
CREATE TABLE audit_log (
    id        bigserial   PRIMARY KEY,
    tenant_id uuid        NOT NULL,
    actor     text        NOT NULL,
    action    text        NOT NULL,
    object    text        NOT NULL DEFAULT '',
    at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX audit_log_tenant_idx ON audit_log (tenant_id, id DESC);

-- +goose Down
DROP TABLE audit_log;
DROP TABLE sessions;
DROP TABLE memberships;
DROP TABLE users;
