-- Argentina (issue 21), what follows a sale's voucher. PostgreSQL twin of
-- sqlite/0029_arca_followups.sql.
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
    created_at    TIMESTAMPTZ NOT NULL,
    updated_at    TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (provider, payment_id)
);

-- The customer's email of an authorized ARCA voucher: a delivery without an outbox row,
-- naming the voucher's key instead (its message_id is derived from it).
ALTER TABLE deliveries ALTER COLUMN outbox_id DROP NOT NULL;
ALTER TABLE deliveries ADD COLUMN arca_key TEXT;
ALTER TABLE deliveries ADD CONSTRAINT deliveries_one_document
    CHECK ((outbox_id IS NULL) <> (arca_key IS NULL));
