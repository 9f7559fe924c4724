-- Proven identities: a user's email counts for nothing until its owner followed the link
-- mailed to it (email_verified_at is then set).

-- +goose Up
ALTER TABLE users ADD COLUMN email_verified_at timestamptz;

-- +goose Down
ALTER TABLE users DROP COLUMN email_verified_at;
