//! The server the tests use (`MODU_POSTGRES_URL`) and a fresh schema per store.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use modu_postgres::sqlx::PgPool;

/// The server's URL; `None` (the test skips) when it is unset outside CI.
pub fn url() -> Option<String> {
    modu_testing::service_env("MODU_POSTGRES_URL")
}

/// A schema name no other test uses (`modu-test:<test>:<uuid>`, quoted by the crate).
pub fn schema(test: &str) -> String {
    modu_testing::unique_prefix(test)
}

/// A pool whose tables live in a fresh schema, migrated.
pub async fn fresh_pool(url: &str, test: &str) -> PgPool {
    modu_postgres::connect_in_schema(url, &schema(test))
        .await
        .expect("MODU_POSTGRES_URL must point at a running PostgreSQL server")
}
