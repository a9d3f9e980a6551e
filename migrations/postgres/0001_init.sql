-- Inbound webhooks, payments, folios and the invoice outbox (PostgreSQL twin of sqlite/0001_init.sql).

-- Every signed delivery we accepted, verbatim, for audit and replay.
CREATE TABLE webhook_events (
    id            BIGSERIAL   PRIMARY KEY,
    provider      TEXT        NOT NULL,
    event_id      TEXT        NOT NULL,
    event_type    TEXT        NOT NULL,
    -- processed | ignored | recorded | malformed | pending_fetch | needs_attention | duplicate_payment
    status        TEXT        NOT NULL,
    reason        TEXT,
    payment_ref   TEXT,
    livemode      BOOLEAN,
    api_version   TEXT,
    account       TEXT,
    headers_json  TEXT        NOT NULL DEFAULT '{}',
    raw_body      BYTEA       NOT NULL,
    -- Mercado Pago: fetch attempts of the payment the notification points to.
    attempts      INTEGER     NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ,
    received_at   TIMESTAMPTZ NOT NULL,
    updated_at    TIMESTAMPTZ NOT NULL,
    UNIQUE (provider, event_id)
);
CREATE INDEX webhook_events_pending ON webhook_events (status, next_attempt_at);

-- One row per paid sale, whatever happens to its invoice.
CREATE TABLE payments (
    id            BIGSERIAL   PRIMARY KEY,
    provider      TEXT        NOT NULL,
    payment_id    TEXT        NOT NULL,
    event_id      TEXT        NOT NULL,
    -- Decimal text in major units ("116.00"), exact.
    amount        TEXT        NOT NULL,
    currency      TEXT        NOT NULL,
    method        TEXT        NOT NULL,
    forma_pago    TEXT,
    customer_json TEXT        NOT NULL,
    paid_at       TIMESTAMPTZ NOT NULL,
    livemode      BOOLEAN     NOT NULL,
    -- invoice_pending | awaiting_global | needs_attention
    status        TEXT        NOT NULL,
    reason        TEXT,
    created_at    TIMESTAMPTZ NOT NULL,
    updated_at    TIMESTAMPTZ NOT NULL,
    UNIQUE (provider, payment_id)
);
CREATE INDEX payments_status ON payments (status);

-- Next folio per serie, allocated inside the ingest transaction.
CREATE TABLE folio_sequences (
    serie      TEXT   PRIMARY KEY,
    next_folio BIGINT NOT NULL
);

-- One row per comprobante to stamp, frozen at ingest.
CREATE TABLE outbox (
    id                 BIGSERIAL   PRIMARY KEY,
    payment_id         BIGINT      NOT NULL REFERENCES payments (id),
    kind               TEXT        NOT NULL,
    stamp_key          TEXT        NOT NULL UNIQUE,
    -- The complete cfdi::InvoiceRequest as JSON text (not JSONB: the exact bytes are kept).
    request_json       TEXT        NOT NULL,
    -- The exact sealed bytes, written once before the first PAC call, never rebuilt.
    sealed_xml         BYTEA,
    -- pending | stamping | retry_scheduled | unknown | stamped | failed | expired
    -- | awaiting_global | needs_attention
    state              TEXT        NOT NULL,
    attempts           INTEGER     NOT NULL DEFAULT 0,
    run_at             TIMESTAMPTZ NOT NULL,
    lease_owner        TEXT,
    lease_expires_at   TIMESTAMPTZ,
    last_error_code    TEXT,
    last_error_message TEXT,
    uuid               TEXT,
    tfd_xml            TEXT,
    stamped_xml        BYTEA,
    test_mode          BOOLEAN     NOT NULL,
    fecha              TIMESTAMP   NOT NULL,
    serie              TEXT,
    folio              TEXT,
    created_at         TIMESTAMPTZ NOT NULL,
    updated_at         TIMESTAMPTZ NOT NULL,
    UNIQUE (payment_id, kind)
);
CREATE INDEX outbox_claim ON outbox (state, run_at);
