-- modu-sqlite schema, version 4: the OAuth tokens of MCP servers (`SqliteMcpTokenStore`,
-- feature `mcp`; the table exists whatever the features, so every build agrees on the schema).

-- One row per token entry: the key the MCP connector names it by ("<server name> <url>"),
-- the tokens as JSON, and when they were last saved (ms since the Unix epoch).
CREATE TABLE IF NOT EXISTS modu_mcp_tokens (
    key      TEXT PRIMARY KEY NOT NULL,
    tokens   TEXT NOT NULL,
    saved_ms INTEGER NOT NULL
);
