-- The submission a form carried when its action was taken (a token the form page draws once):
-- a second send of the same form (a double click, a resend after a lost answer) finds its
-- first one here and is shown its result instead of an error. NULL for actions without one.
ALTER TABLE admin_actions ADD COLUMN submission TEXT;
CREATE INDEX admin_actions_submission ON admin_actions (target_kind, target_id, submission);
