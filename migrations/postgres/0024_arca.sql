-- Argentina (ARCA, WSFEv1): the voucher number is the identity of a voucher, because ARCA takes
-- no idempotency key. A number is reserved here before it is sent, and never given to another
-- key while its outcome is unknown (docs/arca.md).

-- One row per sequence (environment, CUIT, punto de venta, voucher type): the last number
-- claimed on it and by which key. Written in the same transaction as the reservation it names.
CREATE TABLE arca_sequences (
    environment TEXT        NOT NULL,
    cuit        BIGINT      NOT NULL,
    pto_vta     INTEGER     NOT NULL,
    cbte_tipo   INTEGER     NOT NULL,
    -- The last number claimed (or ARCA's last authorized, when read because no claim was).
    last_number BIGINT      NOT NULL,
    -- The key that claimed it; NULL when last_number was read from ARCA.
    last_key    TEXT,
    -- CbteFch of the last claim: a sequence's dates never go back (ARCA refuses it, 10016).
    last_date   TEXT,       -- yyyy-mm-dd
    updated_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (environment, cuit, pto_vta, cbte_tipo)
);

-- One row per idempotency key (one sale's voucher): never deleted or given another number.
CREATE TABLE arca_vouchers (
    key           TEXT        PRIMARY KEY,
    environment   TEXT        NOT NULL,
    cuit          BIGINT      NOT NULL,
    pto_vta       INTEGER     NOT NULL,
    cbte_tipo     INTEGER     NOT NULL,
    number        BIGINT      NOT NULL,
    cbte_fch      TEXT        NOT NULL, -- yyyy-mm-dd
    -- SHA-256 of the input: the key reused with another input is refused.
    input_hash    TEXT        NOT NULL,
    -- The exact input sent (JSON), so a resend is the same request.
    input         TEXT        NOT NULL,
    -- reserved: a send may be in flight until sending_until; unknown: sent, no answer to trust;
    -- authorized / rejected / conflict (a foreign voucher holds the number): settled.
    state         TEXT        NOT NULL
        CHECK (state IN ('reserved', 'unknown', 'authorized', 'rejected', 'conflict')),
    sending_until TIMESTAMPTZ,
    sends         INTEGER     NOT NULL DEFAULT 0,
    cae           TEXT,
    cae_due       TEXT,       -- yyyy-mm-dd
    -- Authorized by consulting the number after an answer was lost.
    recovered     BOOLEAN     NOT NULL DEFAULT FALSE,
    errors        TEXT,       -- JSON [{code, msg}] of a rejection
    observations  TEXT,       -- JSON [{code, msg}] that came with the answer
    detail        TEXT,       -- the last transport failure, or what holds the number
    created_at    TIMESTAMPTZ NOT NULL,
    updated_at    TIMESTAMPTZ NOT NULL
);
-- A number holds at most one live voucher of ours; a rejection frees it (ARCA did not use it).
CREATE UNIQUE INDEX arca_vouchers_number ON arca_vouchers (environment, cuit, pto_vta, cbte_tipo, number)
    WHERE state <> 'rejected';

-- Leases shared by the instances on one database (sequence reservations, WSAA logins): taken
-- with INSERT … ON CONFLICT DO NOTHING, released by a DELETE that checks the owner, taken over
-- once expired. No session locks, so a transaction-pooling proxy is fine.
CREATE TABLE arca_locks (
    name       TEXT        PRIMARY KEY,
    owner      TEXT        NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);

-- WSAA access tickets (12 h): kept so that a restart does not log in again while ARCA still
-- holds a valid ticket and refuses a second one (coe.alreadyAuthenticated).
CREATE TABLE arca_tickets (
    environment      TEXT        NOT NULL,
    service          TEXT        NOT NULL,
    cert_fingerprint TEXT        NOT NULL,
    token            TEXT        NOT NULL,
    sign             TEXT        NOT NULL,
    generated_at     TIMESTAMPTZ NOT NULL,
    expires_at       TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (environment, service, cert_fingerprint)
);
