-- The invoicing API: keys, invoices requested through it, idempotency records and the outgoing
-- webhooks to the merchant (PostgreSQL twin of sqlite/0005_api.sql).

-- Bearer keys: shown once; only the SHA-256 of the key is kept. Each is scoped to one emisor.
CREATE TABLE api_keys (
    id          BIGSERIAL   PRIMARY KEY,
    name        TEXT    NOT NULL,
    key_hash    TEXT    NOT NULL UNIQUE,
    -- The first characters of the key, to tell keys apart in lists.
    prefix      TEXT    NOT NULL,
    rfc_emisor  TEXT    NOT NULL,
    created_at  TIMESTAMPTZ    NOT NULL,
    revoked_at  TIMESTAMPTZ
);

-- One row per invoice asked for through the API; its comprobante is an ordinary outbox row.
CREATE TABLE api_invoices (
    id              BIGSERIAL   PRIMARY KEY,
    public_id       TEXT    NOT NULL UNIQUE,
    rfc_emisor      TEXT    NOT NULL,
    api_key_id      BIGINT  NOT NULL REFERENCES api_keys (id),
    outbox_id       BIGINT  NOT NULL REFERENCES outbox (id),
    idempotency_key TEXT,
    -- `serie/folio` while an explicitly requested folio is held; NULL once released.
    folio_claim     TEXT,
    created_at      TIMESTAMPTZ    NOT NULL,
    UNIQUE (rfc_emisor, folio_claim)
);
CREATE INDEX api_invoices_outbox ON api_invoices (outbox_id);

-- Idempotency keys per emisor. `in_progress` until the invoice is stamped (then `completed`
-- with the exact response replayed to every retry); a key whose invoice ended without a stamp
-- is released when it is used again.
CREATE TABLE api_idempotency (
    rfc_emisor      TEXT    NOT NULL,
    idem_key        TEXT    NOT NULL,
    request_hash    TEXT    NOT NULL,
    -- in_progress | completed
    state           TEXT    NOT NULL,
    invoice_id      BIGINT  NOT NULL REFERENCES api_invoices (id),
    response_status INTEGER,
    response_body   TEXT,
    created_at      TIMESTAMPTZ    NOT NULL,
    expires_at      TIMESTAMPTZ    NOT NULL,
    PRIMARY KEY (rfc_emisor, idem_key)
);
CREATE INDEX api_idempotency_expiry ON api_idempotency (expires_at);

-- Outgoing webhooks (invoice.stamped, invoice.failed, invoice.canceled), written in the
-- transaction of the state change; the payload is fixed on the first delivery attempt.
CREATE TABLE api_webhook_outbox (
    id           BIGSERIAL   PRIMARY KEY,
    invoice_id   BIGINT  NOT NULL REFERENCES api_invoices (id),
    event_type   TEXT    NOT NULL,
    payload      TEXT,
    -- pending | delivered | failed
    state        TEXT    NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    run_at       TIMESTAMPTZ    NOT NULL,
    last_error   TEXT,
    created_at   TIMESTAMPTZ    NOT NULL,
    delivered_at TIMESTAMPTZ
);
CREATE INDEX api_webhook_outbox_due ON api_webhook_outbox (state, run_at);
