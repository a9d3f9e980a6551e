-- Argentina (issue 21), what follows a sale's voucher. SQLite twin of
-- postgres/0029_arca_followups.sql.
--
-- A held or rejected ARS sale corrected by a human: the buyer to name and the attempt the sale
-- is issued again under (`{provider}:{payment_id}#{attempt}`, a key never used before).
CREATE TABLE arca_corrections (
    provider      TEXT    NOT NULL,
    payment_id    TEXT    NOT NULL,
    -- CUIT | CUIL | DNI | '' (consumidor final without identification)
    doc_kind      TEXT    NOT NULL,
    doc_number    TEXT    NOT NULL,
    -- A Receptor's name (responsable_inscripto, consumidor_final, ...).
    condicion_iva TEXT    NOT NULL,
    attempt       INTEGER NOT NULL,
    actor         TEXT    NOT NULL,
    created_at    TEXT    NOT NULL,
    updated_at    TEXT    NOT NULL,
    PRIMARY KEY (provider, payment_id)
);

-- The customer's email of an authorized ARCA voucher: a delivery without an outbox row,
-- naming the voucher's key instead. SQLite cannot drop a NOT NULL: the table is rebuilt.
CREATE TABLE deliveries_new (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    outbox_id    INTEGER REFERENCES outbox (id),
    event        TEXT    NOT NULL,
    resend       INTEGER NOT NULL DEFAULT 0,
    recipient    TEXT    NOT NULL,
    message_id   TEXT    NOT NULL UNIQUE,
    state        TEXT    NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    run_at       TEXT    NOT NULL,
    lease_owner  TEXT,
    last_reply   TEXT,
    requested_by TEXT,
    created_at   TEXT    NOT NULL,
    updated_at   TEXT    NOT NULL,
    sent_at      TEXT,
    -- The ARCA voucher's idempotency key (outbox_id NULL); its message_id is derived from it.
    arca_key     TEXT,
    UNIQUE (outbox_id, event, resend),
    CHECK ((outbox_id IS NULL) <> (arca_key IS NULL))
);
INSERT INTO deliveries_new (id, outbox_id, event, resend, recipient, message_id, state, attempts,
    run_at, lease_owner, last_reply, requested_by, created_at, updated_at, sent_at)
    SELECT id, outbox_id, event, resend, recipient, message_id, state, attempts, run_at,
    lease_owner, last_reply, requested_by, created_at, updated_at, sent_at FROM deliveries;
DROP TABLE deliveries;
ALTER TABLE deliveries_new RENAME TO deliveries;
CREATE INDEX deliveries_due ON deliveries (run_at, id) WHERE state IN ('pending', 'retry');
