-- The admin an operator trusts at a glance (sqlite twin of the other backend's 0011_admin_search.sql).

-- The dashboard reads the PAC calls of a recent time window (its health, its chart of stamps
-- and errors per minute over 24 hours): by time, not by the whole log.
CREATE INDEX pac_attempts_at ON pac_attempts (at);

-- Stamping paused per PAC from the admin: while a PAC has a row here, no worker claims a
-- document or a cancellation for it. Who paused it and why are also in admin_actions.
CREATE TABLE pac_pauses (
    pac        TEXT        PRIMARY KEY,
    paused_by  TEXT        NOT NULL,
    reason     TEXT        NOT NULL,
    paused_at  TEXT        NOT NULL
);
