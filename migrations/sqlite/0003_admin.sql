-- The admin's password when none is configured: generated on first start, printed once, and
-- kept here as an argon2 PHC string (SQLite twin of postgres/0003_admin.sql).
CREATE TABLE admin_credentials (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    password_hash TEXT    NOT NULL,
    created_at    TEXT    NOT NULL
);

-- Sessions are looked up by hash and purged by expiry.
CREATE INDEX admin_sessions_expiry ON admin_sessions (expires_at);
-- Lists by state, newest change first.
CREATE INDEX outbox_state_updated ON outbox (state, updated_at);
CREATE INDEX reconciliation_findings_status ON reconciliation_findings (status, kind);
