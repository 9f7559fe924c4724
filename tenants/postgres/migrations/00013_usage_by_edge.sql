-- Usage folded per edge (package billing/postgres), for `tollgate billing reconcile`.
--
-- usage_hourly says what a tenant used; it cannot say which edge served it, so a batch
-- lost from one edge and one folded twice from another cancel out in it. Fold adds each
-- batch to usage_edge_hourly in the same transaction as usage_hourly and usage_batches,
-- so both rollups move together, exactly once per batch id, and reconcile can compare
-- each edge's own totals (summed over its boots) with what was folded from its batches.
-- boot_id is kept so that folded batches of a boot that never published its totals can
-- be told from a double count.
--
-- Usage folded before this migration cannot be attributed: it is copied here under
-- edge_id '' and boot_id '', and reconcile compares those hours per tenant only.

-- +goose Up
CREATE TABLE usage_edge_hourly (
    tenant_id uuid        NOT NULL,
    hour      timestamptz NOT NULL CONSTRAINT usage_edge_hourly_hour_check CHECK (date_trunc('hour', hour) = hour),
    edge_id   text        NOT NULL,
    boot_id   text        NOT NULL,
    requests  bigint      NOT NULL DEFAULT 0,
    billable  bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, hour, edge_id, boot_id)
);
CREATE INDEX usage_edge_hourly_hour_idx ON usage_edge_hourly (hour);

INSERT INTO usage_edge_hourly (tenant_id, hour, edge_id, boot_id, requests, billable)
SELECT tenant_id, hour, '', '', sum(requests), sum(billable)
FROM usage_hourly GROUP BY tenant_id, hour;

-- +goose Down
DROP TABLE usage_edge_hourly;
