-- Refunds and lost disputes, each to become one CFDI de egreso (SQLite twin of
-- postgres/0014_refunds_egreso.sql).
--
-- An egreso is an ordinary outbox row (kind `egreso`) hanging from a payment row of its own
-- (provider `refund`, payment_id `{provider}:{refund_id}`), as a global's hangs from one of
-- provider `global`: retry, cancel, refreeze and the admin's lists work on it unchanged.

-- One row per refund the provider reported as succeeded, whatever it became.
CREATE TABLE refunds (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    provider       TEXT    NOT NULL,
    -- The provider's refund id (Stripe `re_…`, Mercado Pago's refund id, a lost dispute `dp_…`).
    refund_id      TEXT    NOT NULL,
    -- The sale it refunds: the provider's payment id (payments.payment_id).
    payment_ref    TEXT    NOT NULL,
    -- Decimal text in major units, exact.
    amount         TEXT    NOT NULL,
    currency       TEXT    NOT NULL,
    refunded_at    TEXT    NOT NULL,
    event_id       TEXT    NOT NULL,
    -- awaiting_original | egreso | global_reduced | canceling | canceled | needs_attention
    status         TEXT    NOT NULL,
    reason         TEXT,
    -- `[refunds] full = "cancel"`: the ingreso's cancellation could not be had, so the refund
    -- is credited by an egreso after all.
    cancel_refused INTEGER NOT NULL DEFAULT 0,
    -- The egreso (outbox row), once frozen; with status `canceling`/`canceled`, the ingreso
    -- cancelled instead (policy `cancel`).
    outbox_id      INTEGER REFERENCES outbox (id),
    created_at     TEXT    NOT NULL,
    updated_at     TEXT    NOT NULL,
    UNIQUE (provider, refund_id)
);
CREATE INDEX refunds_payment ON refunds (provider, payment_ref);
CREATE INDEX refunds_waiting ON refunds (status) WHERE status = 'awaiting_original';
