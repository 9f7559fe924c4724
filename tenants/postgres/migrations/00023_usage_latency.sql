-- Latency: per tenant, route and UTC hour, the distribution of the requests' gateway
-- time and upstream time as DDSketches (DataDog's own binary encoding, microseconds, 1%
-- relative accuracy; package infra/usage), carried from the edges in the usage batches
-- and merged here by billing's Fold in the same transaction, and under the same
-- usage_batches key, as the batch's counts: a redelivered batch merges nothing twice.
--
-- requests is the number of times in the gateway sketch (every request the edges timed);
-- upstream holds only the requests that called the upstream, and is NULL until one did.
-- Like usage_hourly there is no foreign key to tenants. route_id is '' for requests that
-- matched no route.

-- +goose Up
CREATE TABLE usage_latency (
    tenant_id uuid        NOT NULL,
    route_id  text        NOT NULL DEFAULT '',
    hour      timestamptz NOT NULL CONSTRAINT usage_latency_hour_check CHECK (date_trunc('hour', hour) = hour),
    requests  bigint      NOT NULL DEFAULT 0,
    gateway   bytea,
    upstream  bytea,
    PRIMARY KEY (tenant_id, route_id, hour)
);

-- +goose Down
DROP TABLE usage_latency;
