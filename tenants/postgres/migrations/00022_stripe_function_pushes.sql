-- Function time goes to Stripe beside billable requests, on a meter of its own: a push
-- now names the meter it feeds. 'requests' carries billable requests (every push made
-- before this migration); 'function_us' carries function time in whole microseconds, as
-- it is folded, so no hour's push rounds and the month's sum on Stripe is exactly the
-- rollups' sum.
--
-- A tenant's hour has a revision sequence per meter: the primary key gains the meter.
-- The identifier stays unique across both (the function pushes' identifiers have their
-- own prefix, billing.PushIdentifier), since Stripe dedupes on it whatever the meter.

-- A price version that charges function time (function_unit_price > 0) gets a third
-- Stripe price, metered on the function time's meter: function_price_id ('' for the
-- versions that do not, which keep their fingerprint and their prices).

-- +goose Up
ALTER TABLE stripe_prices ADD COLUMN function_price_id text NOT NULL DEFAULT '';

ALTER TABLE stripe_pushes
    ADD COLUMN meter text NOT NULL DEFAULT 'requests'
        CONSTRAINT stripe_pushes_meter_check CHECK (meter IN ('requests', 'function_us')),
    DROP CONSTRAINT stripe_pushes_pkey,
    ADD PRIMARY KEY (tenant_id, meter, hour, revision);

-- +goose Down
DELETE FROM stripe_pushes WHERE meter <> 'requests';
ALTER TABLE stripe_pushes
    DROP CONSTRAINT stripe_pushes_pkey,
    ADD PRIMARY KEY (tenant_id, hour, revision),
    DROP COLUMN meter;
ALTER TABLE stripe_prices DROP COLUMN function_price_id;
