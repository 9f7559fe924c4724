-- Keys a consumer can tell apart and let lapse (package tenants/postgres, consumer.go).
--
-- label names a key for its owner ("ci", "laptop"); expires_at, when set, travels in the
-- key's config entry and the edges refuse the key from then on; last_used_at is written
-- from the edges' batched reports of which keys they took (at most one update per key per
-- report), never per request.

-- +goose Up
ALTER TABLE keys
    ADD COLUMN label        text        NOT NULL DEFAULT ''
        CONSTRAINT keys_label_check CHECK (char_length(label) <= 100),
    ADD COLUMN expires_at   timestamptz,
    ADD COLUMN last_used_at timestamptz;

-- +goose Down
ALTER TABLE keys DROP COLUMN last_used_at, DROP COLUMN expires_at, DROP COLUMN label;
