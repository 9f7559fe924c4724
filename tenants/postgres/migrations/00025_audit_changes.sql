-- What a change changed, beside who made it: an update's fields before and after, a
-- config apply's or an import's objects by name (tenants.AuditChanges, bounded in size,
-- secrets left out). NULL for the entries written before, and for the writes that have
-- nothing to add to their action and object.

-- +goose Up
ALTER TABLE audit_log ADD COLUMN changes jsonb;

-- +goose Down
ALTER TABLE audit_log DROP COLUMN changes;
