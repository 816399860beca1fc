//! Checkpoint save+load per second on Redis: `RedisCheckpointStore` next to the raw `redis`
//! client doing the same SET/GET of the same ~4 KiB bytes on the same connection.
//!
//! `REDIS_URL=redis://127.0.0.1:PORT/ cargo bench -p modu-redis --bench checkpoint`
//! (without `REDIS_URL` the bench starts its own `redis-server` on a free port).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use modu_core::{CheckpointMeta, CheckpointStatus, CheckpointStore};
use modu_redis::RedisCheckpointStore;
use modu_redis::redis::AsyncCommands;

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

fn start_server() -> (String, Option<Child>) {
    if let Ok(url) = std::env::var("REDIS_URL") {
        return (url, None);
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("set REDIS_URL or put redis-server on PATH");
    std::thread::sleep(Duration::from_millis(300));
    (format!("redis://127.0.0.1:{port}/"), Some(child))
}

fn bench(c: &mut Criterion) {
    let (url, mut child) = start_server();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let conn = rt.block_on(modu_redis::connect(&url)).unwrap();
    let bytes = checkpoint_bytes();
    let meta = CheckpointMeta::new("bench", CheckpointStatus::Running).with_session(Some("s"));
    let prefix = format!("modu-bench:{}", std::process::id());
    let store = RedisCheckpointStore::new(conn.clone()).with_prefix(&prefix);
    let store_ttl = RedisCheckpointStore::new(conn.clone())
        .with_prefix(format!("{prefix}:ttl"))
        .with_ttl(Duration::from_secs(3600));
    let raw_key = format!("{prefix}:raw");

    let mut group = c.benchmark_group(format!("redis_checkpoint_save_load_{}B", bytes.len()));
    group.throughput(Throughput::Elements(1));
    group.bench_function("raw_set_get", |b| {
        b.to_async(&rt).iter(|| {
            let mut conn = conn.clone();
            let (key, bytes) = (&raw_key, &bytes);
            async move {
                let _: () = conn.set(key, bytes.as_slice()).await.unwrap();
                let back: Vec<u8> = conn.get(key).await.unwrap();
                assert_eq!(back.len(), bytes.len());
            }
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
            store_ttl.save("run", &meta, &bytes).await.unwrap();
            let back = store_ttl.load("run").await.unwrap().unwrap();
            assert_eq!(back.len(), bytes.len());
        })
    });
    group.finish();

    rt.block_on(async {
        let mut conn = conn.clone();
        let _: () = conn
            .del(&[
                raw_key.clone(),
                format!("{prefix}:checkpoint:run"),
                format!("{prefix}:checkpoint-meta:run"),
                format!("{prefix}:checkpoints"),
                format!("{prefix}:checkpoints-expiry"),
                format!("{prefix}:ttl:checkpoint:run"),
                format!("{prefix}:ttl:checkpoint-meta:run"),
                format!("{prefix}:ttl:checkpoints"),
                format!("{prefix}:ttl:checkpoints-expiry"),
            ])
            .await
            .unwrap();
    });
    if let Some(child) = child.as_mut() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
