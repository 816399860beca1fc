-- modu-postgres schema, version 2: session leases with fencing tokens.
--
-- One row per leased key (a session id): who holds it, the token of the last take, and when
-- that take expires, by the database's clock (`clock_timestamp()`), never a client's. The row
-- stays after a release (its expiry set to the epoch) and after expiry, so the next take's
-- token is larger than every earlier one.
CREATE TABLE IF NOT EXISTS modu_leases (
    key        TEXT COLLATE "C" PRIMARY KEY,
    holder     TEXT NOT NULL,
    token      BIGINT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
