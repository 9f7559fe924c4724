-- Invitations by consent: an invite is accepted only through the single-use link mailed to
-- its address. The link's token is kept as its SHA-256 (token_hash), never in plaintext;
-- re-inviting replaces it, accepting, declining or withdrawing deletes the row. Invites
-- from before this change were never mailed: they get no token and have expired, so an
-- owner sees them and invites again.

-- +goose Up
ALTER TABLE invites ADD COLUMN token_hash text;
ALTER TABLE invites ADD COLUMN expires_at timestamptz;
UPDATE invites SET expires_at = now();
ALTER TABLE invites ALTER COLUMN expires_at SET NOT NULL;
CREATE UNIQUE INDEX invites_token_hash_key ON invites (token_hash);

-- +goose Down
DROP INDEX invites_token_hash_key;
ALTER TABLE invites DROP COLUMN expires_at;
ALTER TABLE invites DROP COLUMN token_hash;
