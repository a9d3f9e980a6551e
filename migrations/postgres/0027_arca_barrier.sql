-- The barrier (issue 21, docs/arca.md): an open voucher whose number ARCA proved empty and next,
-- and whose attempt can no longer land, gives its number to the next key that claims it; it is
-- settled `superseded`, naming that key, and never sent again.

ALTER TABLE arca_vouchers DROP CONSTRAINT arca_vouchers_state_check;
ALTER TABLE arca_vouchers ADD CONSTRAINT arca_vouchers_state_check
    CHECK (state IN ('reserved', 'unknown', 'authorized', 'rejected', 'conflict', 'superseded'));
-- After this instant no send of this voucher can still reach ARCA: its last send began, plus the
-- client's timeout and a margin. NULL: no send is known to be in flight.
ALTER TABLE arca_vouchers ADD COLUMN landing_until TIMESTAMPTZ;
-- The key that took this voucher's number (state superseded), written once.
ALTER TABLE arca_vouchers ADD COLUMN superseded_by TEXT;
UPDATE arca_vouchers SET landing_until = sending_until;
-- The superseded voucher and the one that took its number share it.
DROP INDEX arca_vouchers_number;
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
    refused_at       TIMESTAMPTZ NOT NULL,
    retry_at         TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (environment, service, cert_fingerprint)
);
