-- modu-postgres schema, version 1. Every table lives in the schema the connection's
-- search_path selects (`connect_in_schema` sets it; `public` by default).
--
-- Ids use the "C" collation, so ORDER BY and keyset paging (`run_id > $1`) follow the byte
-- order of their UTF-8 text whatever the database's default collation is. Times are
-- milliseconds since the Unix epoch, from the clock of the process that wrote them.

-- One row per session: the next message sequence number, the last access (from which the
-- store's TTL counts) and the last append (what `list_sessions` shows).
CREATE TABLE IF NOT EXISTS modu_sessions (
    session_id  TEXT COLLATE "C" PRIMARY KEY,
    next_seq    BIGINT NOT NULL,
    touched_ms  BIGINT NOT NULL,
    appended_ms BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS modu_sessions_by_touched ON modu_sessions (touched_ms);

-- The messages of a session, in append order (seq), one JSON message per row. TEXT, not
-- JSONB: the message comes back byte for byte (JSONB rejects an escaped NUL and reorders keys).
CREATE TABLE IF NOT EXISTS modu_messages (
    session_id TEXT COLLATE "C" NOT NULL,
    seq        BIGINT NOT NULL,
    message    TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);

-- Run checkpoints: opaque bytes by run id, with the metadata `list` shows.
CREATE TABLE IF NOT EXISTS modu_checkpoints (
    run_id     TEXT COLLATE "C" PRIMARY KEY,
    state      BYTEA NOT NULL,
    agent      TEXT NOT NULL,
    status     TEXT NOT NULL,
    session_id TEXT,
    saved_ms   BIGINT NOT NULL,
    touched_ms BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS modu_checkpoints_by_touched ON modu_checkpoints (touched_ms);

-- Memory state (cached summaries, …) by key.
CREATE TABLE IF NOT EXISTS modu_memory_state (
    key        TEXT COLLATE "C" PRIMARY KEY,
    value      TEXT NOT NULL,
    touched_ms BIGINT NOT NULL
);
