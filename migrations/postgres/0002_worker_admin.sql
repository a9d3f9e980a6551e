-- The worker pool, the PAC attempt log, cancellations, reconciliation and the admin's audit trail
-- (PostgreSQL twin of sqlite/0002_worker_admin.sql).

-- Which PAC holds a document once failover routed it, and which generation of the frozen
-- comprobante the row carries (a deliberate refreeze starts a new one).
ALTER TABLE outbox ADD COLUMN pac_route TEXT;
ALTER TABLE outbox ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;
ALTER TABLE outbox ADD COLUMN sealed_at TIMESTAMPTZ;
ALTER TABLE outbox ADD COLUMN stamped_at TIMESTAMPTZ;
-- The PAC's FechaTimbrado of the stored stamp.
ALTER TABLE outbox ADD COLUMN fecha_timbrado TEXT;
-- Flagged by reconciliation (adopted orphan stamp, duplicate found) for a human to look at.
ALTER TABLE outbox ADD COLUMN flag TEXT;
-- The state a worker claimed the row from (a reclaimed `stamping` row may have been sent).
ALTER TABLE outbox ADD COLUMN claimed_from TEXT;

-- Every PAC call, append-only: for the admin's timeline and for audits.
CREATE TABLE pac_attempts (
    id              BIGSERIAL   PRIMARY KEY,
    outbox_id       BIGINT      REFERENCES outbox (id),
    cancellation_id BIGINT,
    -- stamp | recover | cancel | cancel_status | sat_status
    operation       TEXT        NOT NULL,
    -- primary | backup | sandbox: where the call went
    pac             TEXT        NOT NULL,
    -- stamped | already_stamped | rejected | retryable | unknown | found | not_found | unresolved | requested | …
    outcome         TEXT        NOT NULL,
    http_status     INTEGER,
    code            TEXT,
    message         TEXT,
    latency_ms      BIGINT      NOT NULL,
    uuid            TEXT,
    worker          TEXT,
    at              TIMESTAMPTZ NOT NULL
);
CREATE INDEX pac_attempts_outbox ON pac_attempts (outbox_id, id);
CREATE INDEX pac_attempts_cancellation ON pac_attempts (cancellation_id, id);

-- Earlier generations of a refrozen comprobante, kept for audit.
CREATE TABLE outbox_history (
    id           BIGSERIAL   PRIMARY KEY,
    outbox_id    BIGINT      NOT NULL REFERENCES outbox (id),
    generation   INTEGER     NOT NULL,
    stamp_key    TEXT        NOT NULL,
    request_json TEXT        NOT NULL,
    sealed_xml   BYTEA,
    reason       TEXT        NOT NULL,
    actor        TEXT        NOT NULL,
    at           TIMESTAMPTZ NOT NULL,
    UNIQUE (outbox_id, generation)
);

-- Worker pools alive: one row per process, refreshed by its heartbeat.
CREATE TABLE workers (
    id          TEXT        PRIMARY KEY,
    hostname    TEXT        NOT NULL,
    pid         BIGINT      NOT NULL,
    concurrency INTEGER     NOT NULL,
    in_flight   INTEGER     NOT NULL DEFAULT 0,
    started_at  TIMESTAMPTZ NOT NULL,
    last_seen   TIMESTAMPTZ NOT NULL,
    stopped_at  TIMESTAMPTZ
);

-- Cancellation is its own outbox flow: the request is frozen here, a worker sends it and polls
-- its status until terminal.
CREATE TABLE cancellations (
    id                  BIGSERIAL   PRIMARY KEY,
    outbox_id           BIGINT      REFERENCES outbox (id),
    uuid                TEXT        NOT NULL,
    rfc_emisor          TEXT        NOT NULL,
    rfc_receptor        TEXT        NOT NULL,
    -- Decimal text, as in the comprobante.
    total               TEXT        NOT NULL,
    -- 01 | 02 | 03 | 04
    motivo              TEXT        NOT NULL,
    folio_sustitucion   TEXT,
    -- requested | sending | retry_scheduled | unknown | pending_receiver | canceled | rejected | failed
    state               TEXT        NOT NULL,
    requires_acceptance BOOLEAN     NOT NULL,
    attempts            INTEGER     NOT NULL DEFAULT 0,
    run_at              TIMESTAMPTZ NOT NULL,
    lease_owner         TEXT,
    lease_expires_at    TIMESTAMPTZ,
    estatus_cancelacion TEXT,
    sat_estado          TEXT,
    acuse_xml           TEXT,
    last_error_code     TEXT,
    last_error_message  TEXT,
    requested_by        TEXT        NOT NULL,
    created_at          TIMESTAMPTZ NOT NULL,
    updated_at          TIMESTAMPTZ NOT NULL,
    UNIQUE (uuid)
);
CREATE INDEX cancellations_claim ON cancellations (state, run_at);

-- What reconciliation found: more than one live UUID for a payment, or a stamp we never recorded.
CREATE TABLE reconciliation_findings (
    id          BIGSERIAL   PRIMARY KEY,
    -- duplicate | orphan
    kind        TEXT        NOT NULL,
    outbox_id   BIGINT      REFERENCES outbox (id),
    uuid        TEXT        NOT NULL,
    stamp_key   TEXT,
    detail      TEXT        NOT NULL,
    -- open | resolved
    status      TEXT        NOT NULL,
    found_at    TIMESTAMPTZ NOT NULL,
    resolved_at TIMESTAMPTZ,
    UNIQUE (kind, uuid)
);

-- Who did what, when, in the admin.
CREATE TABLE admin_actions (
    id          BIGSERIAL   PRIMARY KEY,
    actor       TEXT        NOT NULL,
    action      TEXT        NOT NULL,
    target_kind TEXT        NOT NULL,
    target_id   TEXT        NOT NULL,
    detail      TEXT,
    at          TIMESTAMPTZ NOT NULL
);
CREATE INDEX admin_actions_target ON admin_actions (target_kind, target_id);

-- Admin sessions: the cookie carries a random token; only its SHA-256 is stored.
CREATE TABLE admin_sessions (
    token_hash  TEXT        PRIMARY KEY,
    csrf_token  TEXT        NOT NULL,
    actor       TEXT        NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL
);
