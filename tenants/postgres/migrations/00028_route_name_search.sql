-- Routes found by a name prefix (GET .../routes?q=, the console's filter): a prefix is one
-- range of the names in bytewise order, whatever the database's collation, so the index
-- keeps them in that order.

-- +goose Up
CREATE INDEX routes_name_bytes_idx ON routes (tenant_id, (name COLLATE "C"));

-- +goose Down
DROP INDEX routes_name_bytes_idx;
