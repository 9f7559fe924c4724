-- Proven addresses, password resets and sign-in throttling.
--
-- user_tokens: the links mailed to a user (verify the address, reset the password), kept
-- as the SHA-256 of the token; a link is spent by setting used_at in the same statement
-- that checks it, so it works once even when two requests race.
-- platform_grants: platform roles the operator granted to an address; one applies to the
-- user with that address once the address is verified, so a grant tells nothing about
-- whether the address has an account and gives an unproven address nothing.
-- throttle: attempt counters shared by every api replica (sign-in per address and per
-- account and address, sign-up and mail requests per address).

-- +goose Up
CREATE TABLE user_tokens (
    hash       text        PRIMARY KEY,
    user_id    uuid        NOT NULL CONSTRAINT user_tokens_user_fkey REFERENCES users (id) ON DELETE CASCADE,
    purpose    text        NOT NULL CONSTRAINT user_tokens_purpose_check CHECK (purpose IN ('verify', 'reset')),
    expires_at timestamptz NOT NULL,
    used_at    timestamptz,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX user_tokens_user_idx ON user_tokens (user_id, purpose);
CREATE INDEX user_tokens_expires_idx ON user_tokens (expires_at);

CREATE TABLE platform_grants (
    email      text        PRIMARY KEY,
    role       text        NOT NULL CONSTRAINT platform_grants_role_check CHECK (role IN ('operator', 'finance')),
    granted_at timestamptz NOT NULL DEFAULT now()
);
-- Roles set before grants existed stay with their users and become grants.
INSERT INTO platform_grants (email, role) SELECT email, platform_role FROM users WHERE platform_role <> '';

CREATE UNLOGGED TABLE throttle (
    key           text        PRIMARY KEY,
    hits          integer     NOT NULL,
    window_end    timestamptz NOT NULL,
    blocked_until timestamptz NOT NULL,
    refused       boolean     NOT NULL DEFAULT false -- whether the last attempt was refused
);
CREATE INDEX throttle_window_end_idx ON throttle (window_end);

-- +goose Down
DROP TABLE throttle;
DROP TABLE platform_grants;
DROP TABLE user_tokens;
