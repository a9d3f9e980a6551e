-- Cheaper writes on the drain's path: claims read the partial indexes of version 4 and
-- lookups by state use outbox_state_updated, so this index only cost an entry per update.
-- (PostgreSQL's version 6 also leaves room for HOT updates and picks lz4 for the documents;
-- SQLite has neither.)
DROP INDEX outbox_claim;
