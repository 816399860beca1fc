//! Checkpoint save+load per second on PostgreSQL: `PostgresCheckpointStore` next to raw sqlx
//! doing the same write/read of the same ~4 KiB bytes (`INSERT … ON CONFLICT DO UPDATE` /
//! `SELECT`) on the same pool, in a schema of its own (dropped at the end).
//!
//! `MODU_POSTGRES_URL=postgres://user@127.0.0.1:PORT/db cargo bench -p modu-postgres --bench checkpoint`
//! (`cargo xtask services` starts a server). Without `MODU_POSTGRES_URL` the bench is skipped,
//! except under CI, where a missing server is an error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use criterion::{Criterion, Throughput};
use modu_core::{CheckpointMeta, CheckpointStatus, CheckpointStore};
use modu_postgres::PostgresCheckpointStore;

/// A checkpoint-shaped JSON document of about 4 KiB.
fn checkpoint_bytes() -> Vec<u8> {
    let mut messages = vec![
        serde_json::json!({"role": "user", "content": [{"type": "text", "text": "Summarise the quarterly report and list the three largest cost items."}]}),
    ];
    let mut i = 0;
    loop {
        messages.push(serde_json::json!({"role": "assistant", "content": [], "tool_calls": [{"id": format!("call_{i}"), "name": "search", "arguments": format!("{{\"query\":\"cost item {i}\",\"limit\":5}}")}]}));
        messages.push(serde_json::json!({"role": "tool", "tool_call_id": format!("call_{i}"), "name": "search", "content": [{"type": "text", "text": format!("result {i}: the cost item number {i} amounted to {} EUR in Q3, up {}% from Q2; details in section {}.", 1000 + i * 37, i % 9, i + 2)}]}));
        i += 1;
        let doc = serde_json::json!({"schema_version": 1, "run_id": "3f2b8c1e-bench", "agent": "bench", "fingerprint": "0123456789abcdef", "session_id": "s", "state": {"messages": messages, "phase": {"phase": "act"}, "usage": {"input_tokens": 1234, "output_tokens": 321, "total_tokens": 1555, "requests": 4}, "model_calls": 4, "turns": 3, "tool_calls": 3}});
        let bytes = serde_json::to_vec(&doc).unwrap();
        if bytes.len() >= 4000 {
            return bytes;
        }
    }
}

fn bench(c: &mut Criterion, url: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let schema = format!("modu_bench_{}", std::process::id());
    let pool = rt
        .block_on(modu_postgres::connect_in_schema(url, &schema))
        .expect("MODU_POSTGRES_URL must point at a running PostgreSQL server");
    rt.block_on(sqlx::query("CREATE TABLE IF NOT EXISTS raw_kv (k TEXT PRIMARY KEY, v BYTEA NOT NULL)").execute(&pool))
        .unwrap();
    let store = rt.block_on(PostgresCheckpointStore::from_pool(pool.clone())).unwrap();
    let store_ttl = rt
        .block_on(PostgresCheckpointStore::from_pool(pool.clone()))
        .unwrap()
        .with_ttl(Duration::from_secs(3600));
    let bytes = checkpoint_bytes();
    let meta = CheckpointMeta::new("bench", CheckpointStatus::Running).with_session(Some("s"));

    let mut group = c.benchmark_group(format!("postgres_checkpoint_save_load_{}B", bytes.len()));
    group.throughput(Throughput::Elements(1));
    group.bench_function("raw_upsert_select", |b| {
        b.to_async(&rt).iter(|| async {
            sqlx::query("INSERT INTO raw_kv (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v")
                .bind("run")
                .bind(bytes.as_slice())
                .execute(&pool)
                .await
                .unwrap();
            let back: Vec<u8> = sqlx::query_scalar("SELECT v FROM raw_kv WHERE k = $1")
                .bind("run")
                .fetch_one(&pool)
                .await
                .unwrap();
            assert_eq!(back.len(), bytes.len());
        })
    });
    group.bench_function("store", |b| {
        b.to_async(&rt).iter(|| async {
            store.save("run", &meta, &bytes).await.unwrap();
            let back = store.load("run").await.unwrap().unwrap();
            assert_eq!(back.len(), bytes.len());
        })
    });
    group.bench_function("store_with_ttl", |b| {
        b.to_async(&rt).iter(|| async {
            store_ttl.save("run-ttl", &meta, &bytes).await.unwrap();
            let back = store_ttl.load("run-ttl").await.unwrap().unwrap();
            assert_eq!(back.len(), bytes.len());
        })
    });
    group.finish();
    rt.block_on(sqlx::raw_sql(&format!("DROP SCHEMA \"{schema}\" CASCADE")).execute(&pool))
        .unwrap();
}

fn main() {
    // What `criterion_main!` does, after checking that there is a server to measure.
    let Some(url) = modu_testing::service_env("MODU_POSTGRES_URL") else {
        return;
    };
    let mut c = Criterion::default()
        .sample_size(30)
        .measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1))
        .configure_from_args();
    bench(&mut c, &url);
    c.final_summary();
}
