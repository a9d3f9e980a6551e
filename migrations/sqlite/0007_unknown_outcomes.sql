-- An outcome the PAC never confirmed is never final (sqlite twin of postgres/0007_unknown_outcomes.sql).
--
-- Earlier versions ended such a row `failed` (code UNKNOWN, after max_attempts unanswered
-- questions) or `expired` (its window closed while the question was open), and an API key whose
-- invoice expired that way was released, and then reused or superseded: a retry could stamp a
-- second CFDI for one sale. From now on `failed`, `expired` and `superseded` mean the PAC
-- definitely did not stamp the document, so every row in one of them whose last PAC call (a send
-- or a question) went unanswered is open again: `unknown`, due now. The worker asks the PAC by
-- its key before anything else; its API key is taken again and replays once the PAC answers.
UPDATE outbox
SET state = 'unknown',
    run_at = updated_at,
    last_error_code = NULL,
    last_error_message = COALESCE(last_error_message || ' ', '')
        || '(reopened: the PAC never confirmed whether it stamped this document)'
WHERE uuid IS NULL
  AND sealed_xml IS NOT NULL
  AND state IN ('failed', 'expired', 'superseded')
  AND (last_error_code = 'UNKNOWN'
       OR (SELECT a.outcome FROM pac_attempts a
           WHERE a.outbox_id = outbox.id AND a.operation IN ('stamp', 'recover')
           ORDER BY a.id DESC LIMIT 1) IN ('unknown', 'unresolved'));
