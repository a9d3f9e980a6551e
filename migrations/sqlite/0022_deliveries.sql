-- The customer's emails (issue 20): one row per message, written in the transaction that
-- records the stamp (or by an admin's resend) and drained by the courier over SMTP.
-- SQLite twin of postgres/0022_deliveries.sql.
CREATE TABLE deliveries (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    outbox_id    INTEGER NOT NULL REFERENCES outbox (id),
    -- stamped | canceled
    event        TEXT    NOT NULL,
    -- 0: the message of the event; n: the admin's nth resend (a message of its own).
    resend       INTEGER NOT NULL DEFAULT 0,
    recipient    TEXT    NOT NULL,
    -- Derived from the document, the event and the resend: a message sent again after a crash
    -- between the server's acceptance and our write is the same message.
    message_id   TEXT    NOT NULL UNIQUE,
    -- pending | retry | sent | bounced (5xx) | failed (retries exhausted)
    state        TEXT    NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    -- When it is due; while claimed, when its lease ends (a dead courier's row is due again).
    run_at       TEXT    NOT NULL,
    -- Who holds the claim (one courier's claim id); NULL when settled.
    lease_owner  TEXT,
    -- The server's last reply, or why it could not be sent.
    last_reply   TEXT,
    -- The admin who asked for a resend.
    requested_by TEXT,
    created_at   TEXT    NOT NULL,
    updated_at   TEXT    NOT NULL,
    sent_at      TEXT,
    UNIQUE (outbox_id, event, resend)
);
CREATE INDEX deliveries_due ON deliveries (run_at, id) WHERE state IN ('pending', 'retry');
