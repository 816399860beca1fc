-- modu-postgres schema, version 4: memory-state values as their UTF-8 bytes.
--
-- A memory value is any string, and TEXT cannot hold a NUL character ("invalid byte sequence
-- for encoding UTF8: 0x00"), so `put` of such a value failed on PostgreSQL alone. The stored
-- values are converted in place; the store reads them back as UTF-8.
ALTER TABLE modu_memory_state ALTER COLUMN value TYPE BYTEA USING convert_to(value, 'UTF8');
