//! Connecting a pool ([`connect`], [`connect_in_schema`]) and migrating its schema
//! ([`migrate`], [`MIGRATIONS`]).

use std::str::FromStr;
use std::time::Duration;

use modu_core::StoreError;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::{PostgresStoreError, now_ms, query_err, redact_credentials};

/// The schema migrations, embedded in the binary: `(version, description, SQL)`. They are
/// applied in order by [`migrate`] and recorded in the table `modu_schema_migrations` of the
/// store's schema (not sqlx's `_sqlx_migrations`, so an application's own sqlx migrations on
/// the same database and schema do not collide with these).
pub const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "init", include_str!("../migrations/0001_init.sql")),
    (2, "session leases", include_str!("../migrations/0002_leases.sql")),
    (3, "mcp oauth tokens", include_str!("../migrations/0003_mcp_tokens.sql")),
    (
        4,
        "memory values as bytes",
        include_str!("../migrations/0004_memory_values_as_bytes.sql"),
    ),
];

/// The most connections a pool opened by [`connect`] or [`connect_in_schema`] holds.
pub const MAX_CONNECTIONS: u32 = 8;

/// How long an operation waits for a free connection of the pool, and [`connect`] for the
/// server's first answer (then [`StoreError::Timeout`]).
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);

/// The first key of the advisory locks that serialise migrations (the second is the schema).
const MIGRATION_LOCK: i32 = 0x6d6f_6475; // "modu"

/// The longest identifier PostgreSQL keeps (longer ones are silently truncated).
const MAX_IDENTIFIER_BYTES: usize = 63;

/// `name` as a quoted SQL identifier, if PostgreSQL can keep it as it is.
fn quote_identifier(name: &str) -> Result<String, StoreError> {
    let invalid = |reason| -> StoreError {
        PostgresStoreError::InvalidSchema {
            schema: name.to_owned(),
            reason,
        }
        .into()
    };
    if name.is_empty() {
        return Err(invalid("it is empty"));
    }
    if name.len() > MAX_IDENTIFIER_BYTES {
        return Err(invalid("longer than 63 bytes (PostgreSQL would truncate it)"));
    }
    if name.contains('\0') {
        return Err(invalid("it contains a NUL character"));
    }
    Ok(format!("\"{}\"", name.replace('"', "\"\"")))
}

fn pool_options() -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(MAX_CONNECTIONS)
        .acquire_timeout(ACQUIRE_TIMEOUT)
}

fn connect_err(url: &str) -> impl Fn(sqlx::Error) -> StoreError + '_ {
    move |e| match e {
        sqlx::Error::PoolTimedOut => StoreError::Timeout,
        other => PostgresStoreError::Connect {
            // The whole string is the URL, even with a space in a wrongly written password.
            url: modu_core::redact::display_url(url).into_owned(),
            message: redact_credentials(&other.to_string()),
        }
        .into(),
    }
}

/// Opens one connection and closes it, within [`ACQUIRE_TIMEOUT`]: a server that is down, or
/// refuses the login, is a [`PostgresStoreError::Connect`] naming the cause at once. (A pool
/// retries a refused connection until its acquire timeout, then reports only that it timed out.)
async fn reachable(options: &PgConnectOptions, url: &str) -> Result<(), StoreError> {
    use sqlx::{ConnectOptions, Connection};
    let connection = tokio::time::timeout(ACQUIRE_TIMEOUT, options.connect())
        .await
        .map_err(|_| StoreError::Timeout)?
        .map_err(connect_err(url))?;
    // Closing politely is best effort: the server has answered, which is what was asked.
    let _ = connection.close().await;
    Ok(())
}

/// Connects a pool (at most [`MAX_CONNECTIONS`] connections, [`ACQUIRE_TIMEOUT`]) to the
/// database at `url` (`postgres://user:password@host:port/database`; sqlx's URL parameters
/// apply, e.g. `?options=-c%20search_path%3Dmy_schema`), then applies the [`MIGRATIONS`] to the
/// schema the connection's `search_path` selects (`public` by default). No TLS. Share the pool
/// between the three stores.
pub async fn connect(url: &str) -> Result<PgPool, StoreError> {
    let options = PgConnectOptions::from_str(url).map_err(connect_err(url))?;
    reachable(&options, url).await?;
    let pool = pool_options().connect_with(options).await.map_err(connect_err(url))?;
    migrate(&pool).await?;
    Ok(pool)
}

/// Like [`connect`], with every connection's `search_path` set to `schema` alone: the tables
/// live in that schema, which is created if it does not exist yet. Several applications (or
/// tests) can share one database this way, each in its own schema.
pub async fn connect_in_schema(url: &str, schema: &str) -> Result<PgPool, StoreError> {
    let options = PgConnectOptions::from_str(url)
        .map_err(connect_err(url))?
        .options([("search_path", startup_option_value(&quote_identifier(schema)?))]);
    reachable(&options, url).await?;
    let pool = pool_options().connect_with(options).await.map_err(connect_err(url))?;
    create_schema(&pool, schema).await?;
    migrate(&pool).await?;
    Ok(pool)
}

/// `value` escaped for the `options` startup parameter, which the server splits at ASCII
/// whitespace unless a backslash precedes it.
fn startup_option_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | ' ' | '\t' | '\n' | '\u{b}' | '\u{c}' | '\r') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Creates `schema` unless it exists (checked first, so a role without the `CREATE` privilege
/// on the database can use a schema made for it), under the migration lock of that schema.
async fn create_schema(pool: &PgPool, schema: &str) -> Result<(), StoreError> {
    let err = query_err("create_schema");
    let quoted = quote_identifier(schema)?;
    let mut tx = pool.begin().await.map_err(&err)?;
    sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
        .bind(MIGRATION_LOCK)
        .bind(schema)
        .execute(&mut *tx)
        .await
        .map_err(&err)?;
    let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
        .bind(schema)
        .fetch_one(&mut *tx)
        .await
        .map_err(&err)?;
    if !exists {
        sqlx::raw_sql(&format!("CREATE SCHEMA {quoted}"))
            .execute(&mut *tx)
            .await
            .map_err(&err)?;
    }
    tx.commit().await.map_err(&err)
}

/// Applies the [`MIGRATIONS`] the connection's current schema lacks, in one transaction under
/// an advisory lock on that schema (so two processes connecting to a new database at once do
/// not both migrate; DDL is transactional, so a failed migration leaves nothing behind).
/// Idempotent; the stores' `from_pool` constructors call it.
pub async fn migrate(pool: &PgPool) -> Result<(), StoreError> {
    let err = query_err("migrate");
    let mut tx = pool.begin().await.map_err(&err)?;
    let schema: Option<String> = sqlx::query_scalar("SELECT current_schema()::text")
        .fetch_one(&mut *tx)
        .await
        .map_err(&err)?;
    let Some(schema) = schema else {
        return Err(PostgresStoreError::NoSchema.into());
    };
    sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
        .bind(MIGRATION_LOCK)
        .bind(&schema)
        .execute(&mut *tx)
        .await
        .map_err(&err)?;
    // Checked before creating: a role that may use the tables but not create any still passes.
    let has_table: bool = sqlx::query_scalar("SELECT to_regclass('modu_schema_migrations') IS NOT NULL")
        .fetch_one(&mut *tx)
        .await
        .map_err(&err)?;
    if !has_table {
        sqlx::raw_sql(
            "CREATE TABLE modu_schema_migrations (
                version BIGINT PRIMARY KEY,
                description TEXT NOT NULL,
                applied_ms BIGINT NOT NULL
            )",
        )
        .execute(&mut *tx)
        .await
        .map_err(&err)?;
    }
    let current: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(version), 0)::BIGINT FROM modu_schema_migrations")
        .fetch_one(&mut *tx)
        .await
        .map_err(&err)?;
    let known = MIGRATIONS.last().map_or(0, |m| m.0);
    if current > known {
        return Err(PostgresStoreError::SchemaTooNew { found: current, known }.into());
    }
    for (version, description, sql) in MIGRATIONS.iter().filter(|m| m.0 > current) {
        sqlx::raw_sql(sql).execute(&mut *tx).await.map_err(&err)?;
        sqlx::query("INSERT INTO modu_schema_migrations (version, description, applied_ms) VALUES ($1, $2, $3)")
            .bind(version)
            .bind(description)
            .bind(now_ms())
            .execute(&mut *tx)
            .await
            .map_err(&err)?;
    }
    tx.commit().await.map_err(&err)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn schema_names_are_quoted_or_refused() {
        assert_eq!(quote_identifier("modu").unwrap(), "\"modu\"");
        assert_eq!(quote_identifier("a\"b; DROP").unwrap(), "\"a\"\"b; DROP\"");
        assert!(quote_identifier("").is_err());
        assert!(quote_identifier(&"x".repeat(64)).is_err());
        assert!(quote_identifier(&"x".repeat(63)).is_ok());
        assert!(quote_identifier("a\0b").is_err());
        assert_eq!(startup_option_value("\"a b\\c\td\""), "\"a\\ b\\\\c\\\td\"");
    }

    /// A port nothing listens on (bound, then released).
    fn closed_port() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    }

    #[tokio::test]
    async fn a_server_that_is_down_is_a_connect_error_at_once_naming_the_cause() {
        let url = format!("postgres://modu:Down-SECRET@127.0.0.1:{}/app", closed_port());
        let started = std::time::Instant::now();
        let err = connect(&url).await.unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "took {:?} (the pool's acquire timeout is 30 s)",
            started.elapsed()
        );
        let text = err.to_string();
        assert!(text.contains("cannot connect") || text.contains("connect"), "{text}");
        assert!(!matches!(err, StoreError::Timeout), "{err:?}");
        assert!(text.contains("127.0.0.1") && !text.contains("SECRET"), "{text}");
        let err = connect_in_schema(&url, "s").await.unwrap_err();
        assert!(!matches!(err, StoreError::Timeout), "{err:?}");
    }

    #[tokio::test]
    async fn a_connect_error_never_quotes_a_password() {
        let port = closed_port();
        for url in [
            // A `/` in the password: no URL parser takes it.
            format!("postgres://modu:Zq9/pw-SECRET@127.0.0.1:{port}/app"),
            // A space in the password: sqlx takes it and tries to log in.
            format!("postgres://modu:Zq9 pw-SECRET@127.0.0.1:{port}/app"),
            // The password as a URL parameter, which sqlx supports.
            format!("postgres://modu@127.0.0.1:{port}/app?password=pw-SECRET&sslmode=disable"),
        ] {
            let err = connect(&url).await.unwrap_err();
            let (display, debug) = (err.to_string(), format!("{err:?}"));
            assert!(
                !display.contains("SECRET") && !debug.contains("SECRET"),
                "{display} / {debug}"
            );
        }
    }
}
