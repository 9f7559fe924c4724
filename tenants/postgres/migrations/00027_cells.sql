-- Cells: each tenant is served by one edge pool, whose edges follow only the KV bucket of
-- that cell. The control plane places a new tenant; the operator may move it. Every
-- tenant made before cells is in the default cell, whose bucket keeps the old name.
-- An outbox row names the cell whose bucket it goes to: its tenant's when it was written,
-- or the one a move deletes the tenant's entries from.

-- +goose Up
ALTER TABLE tenants ADD COLUMN cell text NOT NULL DEFAULT 'default';
CREATE INDEX tenants_cell_idx ON tenants (cell);
ALTER TABLE outbox ADD COLUMN cell text NOT NULL DEFAULT 'default';

-- +goose Down
ALTER TABLE outbox DROP COLUMN cell;
DROP INDEX tenants_cell_idx;
ALTER TABLE tenants DROP COLUMN cell;
