-- Payments of PPD invoices issued through the API, each to become one CFDI tipo P (complemento
-- de pago, Pagos 2.0) (PostgreSQL twin of sqlite/0023_pagos.sql).
--
-- The REP is an ordinary outbox row (kind `pago`) hanging from a payment row of its own
-- (provider `pago`, payment_id the payment's public id), as an egreso's hangs from one of
-- provider `refund`: the worker, retry and the admin's lists work on it unchanged.
CREATE TABLE api_pagos (
    id             BIGSERIAL PRIMARY KEY,
    public_id      TEXT    NOT NULL UNIQUE,
    -- The PPD invoice paid (api_invoices.id).
    invoice_id     BIGINT  NOT NULL REFERENCES api_invoices (id),
    rfc_emisor     TEXT    NOT NULL,
    -- NumParcialidad: 1, 2, … per invoice, frozen with the REP.
    parcialidad    BIGINT  NOT NULL,
    -- FechaPago, the emisor's local time `YYYY-MM-DDThh:mm:ss`.
    fecha_pago     TEXT    NOT NULL,
    forma_pago     TEXT    NOT NULL,
    -- Decimal text, exact, in `currency`.
    amount         TEXT    NOT NULL,
    currency       TEXT    NOT NULL,
    tipo_cambio    TEXT,
    num_operacion  TEXT,
    -- ImpSaldoAnt and ImpSaldoInsoluto, in the invoice's currency, frozen with the REP.
    saldo_anterior TEXT    NOT NULL,
    saldo_insoluto TEXT    NOT NULL,
    -- The REP (outbox row of kind `pago`).
    outbox_id      BIGINT  NOT NULL REFERENCES outbox (id),
    -- The Idempotency-Key it was recorded under (per emisor) and the hash of its request.
    idem_key       TEXT,
    request_hash   TEXT    NOT NULL,
    created_at     TIMESTAMPTZ NOT NULL,
    UNIQUE (invoice_id, parcialidad),
    UNIQUE (rfc_emisor, idem_key)
);
