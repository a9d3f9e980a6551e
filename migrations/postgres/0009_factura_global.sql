-- The factura global (PostgreSQL twin of sqlite/0009_factura_global.sql).
--
-- A global is an ordinary outbox row (kind `global`) whose payment row is the global's own
-- (provider `global`), as an API invoice has one of provider `api`: retry, cancel, refreeze and
-- the admin's lists work on it unchanged. These tables say what it covers.

-- One row per factura global: its period, currency and place in the period's sequence.
CREATE TABLE globals (
    outbox_id     BIGINT      PRIMARY KEY REFERENCES outbox (id),
    rfc_emisor    TEXT        NOT NULL,
    -- c_Periodicidad code, and the period's first and last local dates (YYYY-MM-DD).
    periodicidad  TEXT        NOT NULL,
    period_start  TEXT        NOT NULL,
    period_end    TEXT        NOT NULL,
    moneda        TEXT        NOT NULL,
    -- 1, 2, …: a period split for size, a sale that arrived after its period's global, or a
    -- replacement (motivo 01) each take the next number.
    seq           INTEGER     NOT NULL,
    payments      INTEGER     NOT NULL,
    -- Decimal text, the comprobante's Total.
    total         TEXT        NOT NULL,
    -- The global this one replaces (cancellation motivo 01, TipoRelacion 04).
    replaces      BIGINT      REFERENCES outbox (id),
    created_at    TIMESTAMPTZ NOT NULL,
    UNIQUE (rfc_emisor, periodicidad, period_start, moneda, seq)
);
CREATE UNIQUE INDEX globals_replaces ON globals (replaces);

-- Which global each sale belongs to: one, written in the transaction that froze the global
-- (moved to the replacement when one is issued).
CREATE TABLE global_members (
    payment_row   BIGINT      PRIMARY KEY REFERENCES payments (id),
    outbox_id     BIGINT      NOT NULL REFERENCES outbox (id),
    added_at      TIMESTAMPTZ NOT NULL
);
CREATE INDEX global_members_outbox ON global_members (outbox_id);

-- The sales waiting for a global, by when they were paid.
CREATE INDEX payments_awaiting_global ON payments (paid_at) WHERE status = 'awaiting_global';

-- Refunds recorded for a sale are looked up when its global is planned.
CREATE INDEX webhook_events_recorded ON webhook_events (provider, payment_ref) WHERE status = 'recorded';
