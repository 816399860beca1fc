-- modu-sqlite schema, version 2: checkpoints carry their metadata (agent, status, session,
-- last save) so they can be listed without decoding them; sessions record their last append;
-- indexes on the last-access columns bound the work of pruning expired rows.

ALTER TABLE modu_checkpoints ADD COLUMN agent TEXT NOT NULL DEFAULT '';
ALTER TABLE modu_checkpoints ADD COLUMN status TEXT NOT NULL DEFAULT 'running';
ALTER TABLE modu_checkpoints ADD COLUMN session_id TEXT;
ALTER TABLE modu_checkpoints ADD COLUMN saved_ms INTEGER NOT NULL DEFAULT 0;

-- Rows written by version 1: the last access is the best known save time, and a checkpoint
-- written by the run loop (JSON) names its agent and session and whether it waits for
-- approvals. Whether it ended on a resumable failure was never stored: such rows say
-- `running` until their next save. (CAST: SQLite reads a BLOB argument of the JSON
-- functions as JSONB.)
UPDATE modu_checkpoints SET saved_ms = touched_ms;
UPDATE modu_checkpoints
SET agent = COALESCE(json_extract(CAST(state AS TEXT), '$.agent'), ''),
    session_id = json_extract(CAST(state AS TEXT), '$.session_id'),
    status = CASE
        WHEN COALESCE(json_array_length(CAST(state AS TEXT), '$.state.interruptions'), 0) > 0 THEN 'paused'
        ELSE 'running'
    END
WHERE json_valid(CAST(state AS TEXT))
  AND json_type(CAST(state AS TEXT), '$.agent') = 'text'
  AND COALESCE(json_type(CAST(state AS TEXT), '$.session_id'), 'null') IN ('text', 'null');

CREATE INDEX IF NOT EXISTS modu_checkpoints_by_touched ON modu_checkpoints (touched_ms);

ALTER TABLE modu_sessions ADD COLUMN appended_ms INTEGER NOT NULL DEFAULT 0;
UPDATE modu_sessions SET appended_ms = touched_ms;

CREATE INDEX IF NOT EXISTS modu_sessions_by_touched ON modu_sessions (touched_ms);
