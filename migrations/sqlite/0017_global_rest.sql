-- The factura global in currencies other than MXN (issue 17): the exchange rate to MXN a sale
-- carries, as the currency engine sets it at ingest (decimal text; NULL for MXN, or while no
-- rate is known). A global in that currency takes its TipoCambio from its sales; sales
-- without one are held out of it, with the reason, until they carry one.
ALTER TABLE payments ADD COLUMN tipo_cambio TEXT;
