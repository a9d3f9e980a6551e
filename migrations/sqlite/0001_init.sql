-- Inbound webhooks, payments, folios and the invoice outbox (SQLite twin of postgres/0001_init.sql).
-- Timestamps are RFC 3339 text in UTC as sqlx writes chrono::DateTime<Utc>; booleans are 0/1.

-- Every signed delivery we accepted, verbatim, for audit and replay.
CREATE TABLE webhook_events (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    provider      TEXT    NOT NULL,
    event_id      TEXT    NOT NULL,
    event_type    TEXT    NOT NULL,
    -- processed | ignored | recorded | malformed | pending_fetch | needs_attention | duplicate_payment
    status        TEXT    NOT NULL,
    reason        TEXT,
    payment_ref   TEXT,
    livemode      INTEGER,
    api_version   TEXT,
    account       TEXT,
    headers_json  TEXT    NOT NULL DEFAULT '{}',
    raw_body      BLOB    NOT NULL,
    -- Mercado Pago: fetch attempts of the payment the notification points to.
    attempts      INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TEXT,
    received_at   TEXT    NOT NULL,
    updated_at    TEXT    NOT NULL,
    UNIQUE (provider, event_id)
);
CREATE INDEX webhook_events_pending ON webhook_events (status, next_attempt_at);

-- One row per paid sale, whatever happens to its invoice.
CREATE TABLE payments (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    provider      TEXT    NOT NULL,
    payment_id    TEXT    NOT NULL,
    event_id      TEXT    NOT NULL,
    -- Decimal text in major units ("116.00"), exact.
    amount        TEXT    NOT NULL,
    currency      TEXT    NOT NULL,
    method        TEXT    NOT NULL,
    forma_pago    TEXT,
    customer_json TEXT    NOT NULL,
    paid_at       TEXT    NOT NULL,
    livemode      INTEGER NOT NULL,
    -- invoice_pending | awaiting_global | needs_attention
    status        TEXT    NOT NULL,
    reason        TEXT,
    created_at    TEXT    NOT NULL,
    updated_at    TEXT    NOT NULL,
    UNIQUE (provider, payment_id)
);
CREATE INDEX payments_status ON payments (status);

-- Next folio per serie, allocated inside the ingest transaction.
CREATE TABLE folio_sequences (
    serie      TEXT    PRIMARY KEY,
    next_folio INTEGER NOT NULL
);

-- One row per comprobante to stamp, frozen at ingest.
CREATE TABLE outbox (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    payment_id         INTEGER NOT NULL REFERENCES payments (id),
    kind               TEXT    NOT NULL,
    stamp_key          TEXT    NOT NULL UNIQUE,
    -- The complete cfdi::InvoiceRequest as JSON: fixes the document (Fecha included).
    request_json       TEXT    NOT NULL,
    -- The exact sealed bytes, written once before the first PAC call, never rebuilt.
    sealed_xml         BLOB,
    -- pending | stamping | retry_scheduled | unknown | stamped | failed | expired
    -- | awaiting_global | needs_attention
    state              TEXT    NOT NULL,
    attempts           INTEGER NOT NULL DEFAULT 0,
    run_at             TEXT    NOT NULL,
    lease_owner        TEXT,
    lease_expires_at   TEXT,
    last_error_code    TEXT,
    last_error_message TEXT,
    uuid               TEXT,
    tfd_xml            TEXT,
    stamped_xml        BLOB,
    test_mode          INTEGER NOT NULL,
    fecha              TEXT    NOT NULL,
    serie              TEXT,
    folio              TEXT,
    created_at         TEXT    NOT NULL,
    updated_at         TEXT    NOT NULL,
    UNIQUE (payment_id, kind)
);
CREATE INDEX outbox_claim ON outbox (state, run_at);
