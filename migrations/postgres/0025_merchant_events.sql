-- Merchant events for every document (issue 20 §4): the signed webhooks of API invoices
-- (`api_webhook_outbox`, one row per API invoice event) become one row per event of any
-- outbox row: Stripe and Mercado Pago sales, egresos, globals and REPs too. Rows keep their id,
-- so a webhook-id already sent (`msg_{public_id}_{id}`) stays the same on its retries.
-- PostgreSQL twin of sqlite/0025_merchant_events.sql.
ALTER TABLE api_webhook_outbox RENAME TO merchant_events;
ALTER INDEX api_webhook_outbox_due RENAME TO merchant_events_due;
ALTER TABLE merchant_events ADD COLUMN outbox_id BIGINT REFERENCES outbox (id);
UPDATE merchant_events w SET outbox_id = a.outbox_id FROM api_invoices a WHERE a.id = w.invoice_id;
ALTER TABLE merchant_events ALTER COLUMN outbox_id SET NOT NULL;
ALTER TABLE merchant_events DROP COLUMN invoice_id;
CREATE INDEX merchant_events_outbox ON merchant_events (outbox_id);
-- A REP's customer address is read through api_pagos by outbox row (store/deliveries.rs).
CREATE INDEX api_pagos_outbox ON api_pagos (outbox_id);
