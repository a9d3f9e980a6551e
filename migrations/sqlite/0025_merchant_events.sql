-- Merchant events for every document (issue 20 §4): the signed webhooks of API invoices
-- (`api_webhook_outbox`, one row per API invoice event) become one row per event of any
-- outbox row: Stripe and Mercado Pago sales, egresos, globals and REPs too. Rows keep their id,
-- so a webhook-id already sent (`msg_{public_id}_{id}`) stays the same on its retries.
-- SQLite twin of postgres/0025_merchant_events.sql (SQLite cannot change a column in place:
-- the table is rebuilt).
CREATE TABLE merchant_events (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    outbox_id    INTEGER NOT NULL REFERENCES outbox (id),
    -- invoice.stamped | invoice.failed | invoice.canceled
    event_type   TEXT    NOT NULL,
    -- Fixed on the first delivery attempt.
    payload      TEXT,
    -- pending | delivered | failed
    state        TEXT    NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    run_at       TEXT    NOT NULL,
    last_error   TEXT,
    created_at   TEXT    NOT NULL,
    delivered_at TEXT
);
INSERT INTO merchant_events (id, outbox_id, event_type, payload, state, attempts, run_at,
    last_error, created_at, delivered_at)
SELECT w.id, a.outbox_id, w.event_type, w.payload, w.state, w.attempts, w.run_at, w.last_error,
    w.created_at, w.delivered_at
FROM api_webhook_outbox w JOIN api_invoices a ON a.id = w.invoice_id;
DROP TABLE api_webhook_outbox;
CREATE INDEX merchant_events_due ON merchant_events (state, run_at);
CREATE INDEX merchant_events_outbox ON merchant_events (outbox_id);
-- A REP's customer address is read through api_pagos by outbox row (store/deliveries.rs).
CREATE INDEX api_pagos_outbox ON api_pagos (outbox_id);
