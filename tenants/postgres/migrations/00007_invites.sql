-- Pending invitations to a tenant. An owner or admin invites an email with a
-- role; when no account has that email yet the invite waits here and sign-up turns it
-- into a membership, in the sign-up's transaction. 00006 is another change's number.

-- +goose Up
CREATE TABLE invites (
    tenant_id  uuid        NOT NULL CONSTRAINT invites_tenant_fkey REFERENCES tenants (id) ON DELETE CASCADE,
    email      text        NOT NULL,
    role       text        NOT NULL CONSTRAINT invites_role_check CHECK (role IN ('owner', 'admin', 'developer', 'viewer')),
    invited_by text        NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, email)
);
CREATE INDEX invites_email_idx ON invites (email);

-- +goose Down
DROP TABLE invites;
