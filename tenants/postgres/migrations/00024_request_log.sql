-- The request log: the calls the edges logged (every refused or failed one, a sample of
-- the others), carried in batches over NATS (infra/reqlog) and stored by `tollgate
-- billing` (billing/postgres/reqlog.go); read by GET /v1/tenants/{slug}/logs.
--
-- request_log is partitioned by day on time (UTC), one partition per day named
-- request_log_pYYYYMMDD. The writer creates the partitions of today and the next two days
-- ahead of need and drops a whole partition once it is older than the longest retention
-- of any platform plan (limits.logs.retention_days, 7 by default): a DROP TABLE, no
-- DELETE and no vacuum. The api never shows a tenant entries older than its own plan's
-- retention. There is no foreign key to tenants: a deleted tenant's entries go with
-- their partitions.
--
-- A batch's id is recorded in request_log_batches in the transaction that inserts its
-- entries, so a redelivered batch inserts nothing. request_log_not_logged sums, per
-- tenant and hour, what the edges left out by sampling and what they dropped.

-- +goose Up
CREATE SEQUENCE request_log_id_seq;

CREATE TABLE request_log (
    id          bigint      NOT NULL DEFAULT nextval('request_log_id_seq'),
    time        timestamptz NOT NULL,
    tenant_id   uuid        NOT NULL,
    request_id  text        NOT NULL,
    method      text        NOT NULL,
    path        text        NOT NULL,
    route_id    text        NOT NULL DEFAULT '',
    route_name  text        NOT NULL DEFAULT '',
    consumer_id text        NOT NULL DEFAULT '',
    status      smallint    NOT NULL,
    code        text        NOT NULL DEFAULT '',
    gateway_us  bigint      NOT NULL,
    upstream_us bigint      NOT NULL,
    bytes_in    bigint      NOT NULL,
    bytes_out   bigint      NOT NULL,
    reason      text        NOT NULL DEFAULT '',
    edge_id     text        NOT NULL
) PARTITION BY RANGE (time);

ALTER SEQUENCE request_log_id_seq OWNED BY request_log.id;

-- The listing, newest first, with its keyset (time, id).
CREATE INDEX request_log_tenant_time_idx ON request_log (tenant_id, time DESC, id DESC);
-- ?request_id= finds one call among millions.
CREATE INDEX request_log_tenant_request_idx ON request_log (tenant_id, request_id);

CREATE TABLE request_log_batches (
    id        text        PRIMARY KEY,
    stored_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX request_log_batches_stored_idx ON request_log_batches (stored_at);

CREATE TABLE request_log_not_logged (
    tenant_id uuid        NOT NULL,
    hour      timestamptz NOT NULL,
    sampled   bigint      NOT NULL DEFAULT 0,
    dropped   bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, hour)
);

-- +goose Down
DROP TABLE request_log_not_logged;
DROP TABLE request_log_batches;
DROP TABLE request_log;
