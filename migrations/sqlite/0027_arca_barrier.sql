-- The barrier (issue 21, docs/arca.md): an open voucher whose number ARCA proved empty and next,
-- and whose attempt can no longer land, gives its number to the next key that claims it; it is
-- settled `superseded`, naming that key, and never sent again.
--
-- SQLite cannot change a CHECK constraint, so the table is rebuilt (new table, copy, drop,
-- rename), with every column of 0024 plus two.
CREATE TABLE arca_vouchers_0027 (
    key           TEXT        PRIMARY KEY,
    environment   TEXT        NOT NULL,
    cuit          INTEGER     NOT NULL,
    pto_vta       INTEGER     NOT NULL,
    cbte_tipo     INTEGER     NOT NULL,
    number        INTEGER     NOT NULL,
    cbte_fch      TEXT        NOT NULL, -- yyyy-mm-dd
    input_hash    TEXT        NOT NULL,
    input         TEXT        NOT NULL,
    -- reserved: a send may be in flight until sending_until; unknown: sent, no answer to trust;
    -- authorized / rejected / conflict (a foreign voucher holds the number) / superseded (its
    -- number went to superseded_by): settled.
    state         TEXT        NOT NULL
        CHECK (state IN ('reserved', 'unknown', 'authorized', 'rejected', 'conflict', 'superseded')),
    sending_until TEXT,
    sends         INTEGER     NOT NULL DEFAULT 0,
    cae           TEXT,
    cae_due       TEXT,
    recovered     INTEGER     NOT NULL DEFAULT 0,
    errors        TEXT,
    observations  TEXT,
    detail        TEXT,
    created_at    TEXT        NOT NULL,
    updated_at    TEXT        NOT NULL,
    -- After this instant no send of this voucher can still reach ARCA: its last send began, plus
    -- the client's timeout and a margin. NULL: no send is known to be in flight.
    landing_until TEXT,
    -- The key that took this voucher's number (state superseded), written once.
    superseded_by TEXT
);
INSERT INTO arca_vouchers_0027 (key, environment, cuit, pto_vta, cbte_tipo, number, cbte_fch,
    input_hash, input, state, sending_until, sends, cae, cae_due, recovered, errors, observations,
    detail, created_at, updated_at, landing_until)
SELECT key, environment, cuit, pto_vta, cbte_tipo, number, cbte_fch, input_hash, input, state,
    sending_until, sends, cae, cae_due, recovered, errors, observations, detail, created_at,
    updated_at, sending_until
FROM arca_vouchers;
DROP TABLE arca_vouchers;
ALTER TABLE arca_vouchers_0027 RENAME TO arca_vouchers;
-- The superseded voucher and the one that took its number share it.
CREATE UNIQUE INDEX arca_vouchers_number ON arca_vouchers (environment, cuit, pto_vta, cbte_tipo, number)
    WHERE state NOT IN ('rejected', 'superseded');

-- WSAA logins refused with coe.alreadyAuthenticated (ARCA holds a valid ticket for the
-- certificate; if none is stored here, a login's answer was lost or its process died before
-- storing it): no instance logs in again before retry_at, which backs off with each refusal in a
-- row. Deleted by the next login that succeeds.
CREATE TABLE arca_login_refusals (
    environment      TEXT        NOT NULL,
    service          TEXT        NOT NULL,
    cert_fingerprint TEXT        NOT NULL,
    refusals         INTEGER     NOT NULL,
    refused_at       TEXT NOT NULL,
    retry_at         TEXT NOT NULL,
    PRIMARY KEY (environment, service, cert_fingerprint)
);
