-- What was sold, line by line (postgres twin of the other backend's 0012_line_items.sql).

-- The lines of a sale as the provider described them (Stripe Checkout line items, Billing
-- invoice lines, Mercado Pago items), JSON, before SAT keys are chosen: an operator's fix or
-- the customer's self-invoice re-plans the sale from them, so it keeps its Conceptos. NULL: a
-- sale without lines (one Concepto with the [invoice] keys).
ALTER TABLE payments ADD COLUMN lines_json TEXT;
