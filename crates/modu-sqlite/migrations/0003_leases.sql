-- modu-sqlite schema, version 3: session leases with fencing tokens.

-- One row per leased key (a session id): who holds it, the token of the last take, and when
-- that take expires (ms since the Unix epoch). The row stays after a release (its expiry set
-- to 0) and after expiry, so the next take's token is larger than every earlier one.
CREATE TABLE IF NOT EXISTS modu_leases (
    key        TEXT PRIMARY KEY NOT NULL,
    holder     TEXT NOT NULL,
    token      INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL
);
