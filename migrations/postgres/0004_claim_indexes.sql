-- Claiming must not scan the outbox: stamped rows accumulate forever, and their XML makes every
-- row wide. One partial index per way a row becomes due, each read in claim order.
CREATE INDEX outbox_due ON outbox (run_at, id) WHERE state IN ('pending', 'retry_scheduled', 'unknown');
CREATE INDEX outbox_lease_expired ON outbox (lease_expires_at, id) WHERE state = 'stamping';
