-- modu-sqlite schema, version 1.

-- One row per session: the next message sequence number and the last access (ms since the
-- Unix epoch), from which the store's TTL counts.
CREATE TABLE IF NOT EXISTS modu_sessions (
    session_id TEXT PRIMARY KEY NOT NULL,
    next_seq   INTEGER NOT NULL,
    touched_ms INTEGER NOT NULL
);

-- The messages of a session, in append order (seq), one JSON message per row.
CREATE TABLE IF NOT EXISTS modu_messages (
    session_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    message    TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;

-- Run checkpoints: opaque bytes by run id.
CREATE TABLE IF NOT EXISTS modu_checkpoints (
    run_id     TEXT PRIMARY KEY NOT NULL,
    state      BLOB NOT NULL,
    touched_ms INTEGER NOT NULL
);

-- Memory state (cached summaries, …) by key.
CREATE TABLE IF NOT EXISTS modu_memory_state (
    key        TEXT PRIMARY KEY NOT NULL,
    value      TEXT NOT NULL,
    touched_ms INTEGER NOT NULL
);
