//! The SQL text, one module per backend with the same names. Only the placeholders (`?` vs
//! `$n`), `BEGIN IMMEDIATE` and a few casts differ; keep the twins in step.

/// SQLite: `?` placeholders.
pub mod sqlite {
    pub const PING: &str = "SELECT 1";

    pub const INSERT_EVENT: &str = "INSERT INTO webhook_events \
        (provider, event_id, event_type, status, reason, payment_ref, livemode, api_version, account, \
         headers_json, raw_body, attempts, next_attempt_at, received_at, updated_at) \
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?) \
        ON CONFLICT (provider, event_id) DO NOTHING RETURNING id";

    pub const EVENT_BY_KEY: &str =
        "SELECT id, status FROM webhook_events WHERE provider = ? AND event_id = ?";

    /// Takes a stored notification over for processing; 0 rows = someone else did.
    pub const FINISH_PENDING_EVENT: &str = "UPDATE webhook_events \
        SET status = ?, reason = ?, payment_ref = COALESCE(?, payment_ref), livemode = COALESCE(?, livemode), updated_at = ? \
        WHERE id = ? AND status = 'pending_fetch'";

    pub const INSERT_PAYMENT: &str = "INSERT INTO payments \
        (provider, payment_id, event_id, amount, currency, method, forma_pago, customer_json, paid_at, \
         livemode, status, reason, created_at, updated_at) \
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
        ON CONFLICT (provider, payment_id) DO NOTHING RETURNING id";

    /// Returns the folio allocated (the value before the increment).
    pub const NEXT_FOLIO: &str = "INSERT INTO folio_sequences (serie, next_folio) VALUES (?, 2) \
        ON CONFLICT (serie) DO UPDATE SET next_folio = folio_sequences.next_folio + 1 \
        RETURNING next_folio - 1";

    pub const INSERT_OUTBOX: &str = "INSERT INTO outbox \
        (payment_id, kind, stamp_key, request_json, state, attempts, run_at, last_error_code, last_error_message, \
         test_mode, fecha, serie, folio, created_at, updated_at) \
        VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
        ON CONFLICT (stamp_key) DO NOTHING RETURNING id";

    /// Claims due notifications for a fetch by pushing their next attempt past the lease.
    pub const CLAIM_PENDING_FETCH: &str = "UPDATE webhook_events \
        SET next_attempt_at = ?, attempts = attempts + 1, updated_at = ? \
        WHERE id IN (SELECT id FROM webhook_events \
                     WHERE status = 'pending_fetch' AND (next_attempt_at IS NULL OR next_attempt_at <= ?) \
                     ORDER BY id LIMIT ?) \
        RETURNING id, provider, event_id, payment_ref, livemode, attempts";

    pub const RESCHEDULE_FETCH: &str = "UPDATE webhook_events SET next_attempt_at = ?, reason = ?, updated_at = ? \
        WHERE id = ? AND status = 'pending_fetch'";

    pub const LIST_INVOICES: &str = "SELECT p.provider, p.payment_id, p.amount, p.currency, p.paid_at, p.livemode, \
        COALESCE(o.state, p.status) AS status, o.serie, o.folio, o.uuid, COALESCE(o.attempts, 0) AS attempts, \
        COALESCE(o.last_error_message, p.reason) AS last_error, o.stamp_key, o.request_json, \
        json_extract(o.request_json, '$.receptor.rfc') AS receptor_rfc \
        FROM payments p LEFT JOIN outbox o ON o.payment_id = p.id AND o.kind = 'ingreso' \
        WHERE (? IS NULL OR COALESCE(o.state, p.status) = ?) ORDER BY p.id";

    pub const LIST_EVENTS: &str = "SELECT provider, event_id, event_type, status, reason, payment_ref, livemode, \
        raw_body, attempts FROM webhook_events ORDER BY id";
}

/// PostgreSQL: `$n` placeholders.
pub mod postgres {
    pub const PING: &str = "SELECT 1";

    pub const INSERT_EVENT: &str = "INSERT INTO webhook_events \
        (provider, event_id, event_type, status, reason, payment_ref, livemode, api_version, account, \
         headers_json, raw_body, attempts, next_attempt_at, received_at, updated_at) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 0, $12, $13, $14) \
        ON CONFLICT (provider, event_id) DO NOTHING RETURNING id";

    pub const EVENT_BY_KEY: &str =
        "SELECT id, status FROM webhook_events WHERE provider = $1 AND event_id = $2";

    pub const FINISH_PENDING_EVENT: &str = "UPDATE webhook_events \
        SET status = $1, reason = $2, payment_ref = COALESCE($3, payment_ref), livemode = COALESCE($4, livemode), updated_at = $5 \
        WHERE id = $6 AND status = 'pending_fetch'";

    pub const INSERT_PAYMENT: &str = "INSERT INTO payments \
        (provider, payment_id, event_id, amount, currency, method, forma_pago, customer_json, paid_at, \
         livemode, status, reason, created_at, updated_at) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) \
        ON CONFLICT (provider, payment_id) DO NOTHING RETURNING id";

    pub const NEXT_FOLIO: &str = "INSERT INTO folio_sequences (serie, next_folio) VALUES ($1, 2) \
        ON CONFLICT (serie) DO UPDATE SET next_folio = folio_sequences.next_folio + 1 \
        RETURNING next_folio - 1";

    pub const INSERT_OUTBOX: &str = "INSERT INTO outbox \
        (payment_id, kind, stamp_key, request_json, state, attempts, run_at, last_error_code, last_error_message, \
         test_mode, fecha, serie, folio, created_at, updated_at) \
        VALUES ($1, $2, $3, $4, $5, 0, $6, $7, $8, $9, $10, $11, $12, $13, $14) \
        ON CONFLICT (stamp_key) DO NOTHING RETURNING id";

    /// `SKIP LOCKED` lets several instances claim different notifications.
    pub const CLAIM_PENDING_FETCH: &str = "UPDATE webhook_events \
        SET next_attempt_at = $1, attempts = attempts + 1, updated_at = $2 \
        WHERE id IN (SELECT id FROM webhook_events \
                     WHERE status = 'pending_fetch' AND (next_attempt_at IS NULL OR next_attempt_at <= $3) \
                     ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED) \
        RETURNING id, provider, event_id, payment_ref, livemode, attempts";

    pub const RESCHEDULE_FETCH: &str = "UPDATE webhook_events SET next_attempt_at = $1, reason = $2, updated_at = $3 \
        WHERE id = $4 AND status = 'pending_fetch'";

    pub const LIST_INVOICES: &str = "SELECT p.provider, p.payment_id, p.amount, p.currency, p.paid_at, p.livemode, \
        COALESCE(o.state, p.status) AS status, o.serie, o.folio, o.uuid, COALESCE(o.attempts, 0) AS attempts, \
        COALESCE(o.last_error_message, p.reason) AS last_error, o.stamp_key, o.request_json, \
        o.request_json::jsonb #>> '{receptor,rfc}' AS receptor_rfc \
        FROM payments p LEFT JOIN outbox o ON o.payment_id = p.id AND o.kind = 'ingreso' \
        WHERE ($1::TEXT IS NULL OR COALESCE(o.state, p.status) = $1) ORDER BY p.id";

    pub const LIST_EVENTS: &str = "SELECT provider, event_id, event_type, status, reason, payment_ref, livemode, \
        raw_body, attempts FROM webhook_events ORDER BY id";
}
