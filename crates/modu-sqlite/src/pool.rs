//! Opening a pool ([`open`], [`open_in_memory`]) and migrating its schema ([`migrate`],
//! [`MIGRATIONS`]).

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use modu_core::StoreError;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};

use crate::{SqliteStoreError, now_ms, query_err};

/// The schema migrations, embedded in the binary: `(version, description, SQL)`. They are
/// applied in order by [`migrate`] and recorded in the table `modu_schema_migrations` (not
/// sqlx's `_sqlx_migrations`, so an application's own sqlx migrations on the same database
/// do not collide with these).
pub const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "init", include_str!("../migrations/0001_init.sql")),
    (
        2,
        "checkpoint metadata, session last append, expiry indexes",
        include_str!("../migrations/0002_list_and_expiry.sql"),
    ),
    (3, "session leases", include_str!("../migrations/0003_leases.sql")),
    (4, "mcp oauth tokens", include_str!("../migrations/0004_mcp_tokens.sql")),
];

/// How long a connection waits for a lock held by another connection or process.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens (creating the file and its parent folders if needed) a SQLite database in WAL mode
/// with a busy timeout of [`BUSY_TIMEOUT`] and `synchronous = NORMAL` (a committed write
/// survives a crash of the process; with WAL, a power loss may lose the last commits), then
/// applies the [`MIGRATIONS`]. Share the pool between the three stores.
pub async fn open(path: impl AsRef<Path>) -> Result<SqlitePool, StoreError> {
    let path = path.as_ref();
    let open_err = |message: String| -> StoreError {
        SqliteStoreError::Open {
            path: path.display().to_string(),
            message,
        }
        .into()
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| open_err(e.to_string()))?;
    }
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(BUSY_TIMEOUT);
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(options)
        .await
        .map_err(|e| open_err(e.to_string()))?;
    migrate(&pool).await?;
    Ok(pool)
}

/// Opens an in-memory database (one connection, so every query sees the same data), migrated.
/// For tests and examples. The database lives as long as its one connection, so the pool
/// never closes it (no idle timeout, no maximum lifetime): the data lasts as long as the pool.
pub async fn open_in_memory() -> Result<SqlitePool, StoreError> {
    let options = SqliteConnectOptions::from_str("sqlite::memory:").map_err(query_err("open"))?;
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        // sqlx closes a connection idle for 10 minutes or 30 minutes old by default: that
        // would drop every table and row, and the next query would find no table.
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_with(options)
        .await
        .map_err(query_err("open"))?;
    migrate(&pool).await?;
    Ok(pool)
}

/// Applies the [`MIGRATIONS`] this database lacks, in one `BEGIN IMMEDIATE` transaction (so
/// two processes opening one new file at once do not both migrate). Idempotent; the stores'
/// `from_pool` constructors call it.
pub async fn migrate(pool: &SqlitePool) -> Result<(), StoreError> {
    let err = query_err("migrate");
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.map_err(&err)?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS modu_schema_migrations (
            version INTEGER PRIMARY KEY NOT NULL,
            description TEXT NOT NULL,
            applied_ms INTEGER NOT NULL
        )",
    )
    .execute(&mut *tx)
    .await
    .map_err(&err)?;
    let current: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) FROM modu_schema_migrations")
        .fetch_one(&mut *tx)
        .await
        .map_err(&err)?;
    let known = MIGRATIONS.last().map_or(0, |m| m.0);
    if current > known {
        return Err(SqliteStoreError::SchemaTooNew { found: current, known }.into());
    }
    for (version, description, sql) in MIGRATIONS.iter().filter(|m| m.0 > current) {
        sqlx::raw_sql(sql).execute(&mut *tx).await.map_err(&err)?;
        sqlx::query("INSERT INTO modu_schema_migrations (version, description, applied_ms) VALUES (?1, ?2, ?3)")
            .bind(version)
            .bind(description)
            .bind(now_ms())
            .execute(&mut *tx)
            .await
            .map_err(&err)?;
    }
    tx.commit().await.map_err(&err)
}
