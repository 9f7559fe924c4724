-- Function time: the run time of tenants' functions (Wasm filters at the edge), metered
-- per request in whole microseconds (rounded up) and carried in the usage batches as
-- function_us (package billing, billing/postgres).
--
-- Fold adds it to usage_hourly and usage_edge_hourly beside requests, in the same
-- transaction and under the same usage_batches key, so it is folded exactly once per
-- batch like them. Rows folded before this migration had no function time: 0.
--
-- A price gets a unit for it, like requests':
--   function amount = ceil(max(0, function_us - included_function_ms * 1000)
--                          * function_unit_price / (function_unit_ms * 1000))
-- in integer minor units, added to the request amount and the monthly fee. The versions
-- that exist keep function time free (function_unit_price 0): a migration never changes a
-- bill; an operator prices it by setting a new version.

-- +goose Up
ALTER TABLE usage_hourly ADD COLUMN function_us bigint NOT NULL DEFAULT 0;
ALTER TABLE usage_edge_hourly ADD COLUMN function_us bigint NOT NULL DEFAULT 0;

ALTER TABLE prices
    ADD COLUMN included_function_ms bigint NOT NULL DEFAULT 0
        CONSTRAINT prices_included_function_check CHECK (included_function_ms BETWEEN 0 AND 9223372036854775),
    ADD COLUMN function_unit_price  bigint NOT NULL DEFAULT 0
        CONSTRAINT prices_function_unit_price_check CHECK (function_unit_price BETWEEN 0 AND 99999999),
    ADD COLUMN function_unit_ms     bigint NOT NULL DEFAULT 1000
        CONSTRAINT prices_function_unit_ms_check CHECK (function_unit_ms BETWEEN 1 AND 9223372036854775);

-- +goose Down
ALTER TABLE prices DROP COLUMN function_unit_ms, DROP COLUMN function_unit_price, DROP COLUMN included_function_ms;
ALTER TABLE usage_edge_hourly DROP COLUMN function_us;
ALTER TABLE usage_hourly DROP COLUMN function_us;
