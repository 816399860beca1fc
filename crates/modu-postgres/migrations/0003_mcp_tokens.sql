-- modu-postgres schema, version 3: the OAuth tokens of MCP servers (`PostgresMcpTokenStore`,
-- feature `mcp`; the table exists whatever the features, so every build agrees on the schema).
--
-- One row per token entry: the key the MCP connector names it by ("<server name> <url>"),
-- the tokens as JSON text (kept byte for byte, unlike JSONB), and when they were last saved.
CREATE TABLE IF NOT EXISTS modu_mcp_tokens (
    key      TEXT COLLATE "C" PRIMARY KEY,
    tokens   TEXT NOT NULL,
    saved_at TIMESTAMPTZ NOT NULL
);
