//! Redis restarts: the first store operation after redis-server comes back succeeds, on the
//! same connection manager, for every store and operation; an append whose connection broke
//! after the server applied it is retried without being stored twice.
//!
//! Design: each test starts its own `redis-server` on a free loopback port with an append-only
//! file and `appendfsync always`, so a restart (SIGKILL, then a new process on the same port and
//! directory) keeps every acknowledged write and the tests can check what the first operation
//! after the restart returns, not only that it returned. A restart leaves the connection
//! manager holding a dead connection: the first command sent on it fails with "broken pipe"
//! (asserted below with a raw command, so the test cannot pass because nothing broke). The
//! ambiguous failure (command applied, reply lost) is made deterministic with a TCP proxy that
//! forwards one request and cuts the connection before the reply gets through.
//! These tests need `redis-server` on PATH (skipped locally without it, required under CI) but
//! not `REDIS_URL`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use modu_agent::{Agent, AgentRequest, RetryConfig};
use modu_core::{
    CheckpointMeta, CheckpointQuery, CheckpointStatus, CheckpointStore, ConversationStore, LeaseStore,
    MemoryStateStore, Message,
};
use modu_redis::redis::{self, aio::ConnectionManager};
use modu_redis::{
    APPEND_BATCH_TTL, RedisCheckpointStore, RedisConversationStore, RedisLeaseStore, RedisMemoryStateStore,
};
use modu_testing::ScriptedModel;
use support::{CuttingProxy, RedisServer, command_calls};

fn turn(n: usize) -> Vec<Message> {
    vec![
        Message::user(format!("question {n}")),
        Message::assistant(format!("answer {n}")),
    ]
}

/// Restarts the server and checks that the connection manager now holds a broken connection:
/// a raw command (no store, so no retry) fails. Used once per test, as the proof that a
/// restart breaks what the stores must recover from.
async fn restart_breaks_the_connection(server: &mut RedisServer, conn: &ConnectionManager) {
    restart(server, conn).await;
    let mut raw = conn.clone();
    let r: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut raw).await;
    let err = r.expect_err("the first raw command after a restart must fail (else this test proves nothing)");
    assert!(err.is_unrecoverable_error(), "{err:?}");
}

/// Restarts the server while the connection manager holds a live connection to it (a raw
/// PING succeeds first, waiting for any reconnection still under way), so the next command
/// meets a connection the restart broke.
async fn restart(server: &mut RedisServer, conn: &ConnectionManager) {
    let mut raw = conn.clone();
    let pong: String = redis::cmd("PING")
        .query_async(&mut raw)
        .await
        .expect("live before the restart");
    assert_eq!(pong, "PONG");
    server.restart();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_operation_after_a_restart_succeeds_for_every_store() {
    let Some(mut server) = RedisServer::try_start() else {
        return;
    };
    let conn = modu_redis::connect(&server.url()).await.unwrap();
    let hour = Duration::from_secs(3600);
    let conv = RedisConversationStore::new(conn.clone())
        .with_prefix("r")
        .with_ttl(hour);
    let ckpt = RedisCheckpointStore::new(conn.clone()).with_prefix("r").with_ttl(hour);
    let ckpt_no_ttl = RedisCheckpointStore::new(conn.clone()).with_prefix("r-plain");
    let mem = RedisMemoryStateStore::new(conn.clone()).with_prefix("r").with_ttl(hour);
    let paused = CheckpointMeta::new("agent", CheckpointStatus::Paused).with_session(Some("s"));

    conv.append("s", &turn(1)).await.unwrap();
    ckpt.save("run-1", &paused, b"state-1").await.unwrap();
    ckpt_no_ttl.save("run-1", &paused, b"plain").await.unwrap();
    mem.put("summary", "요약").await.unwrap();

    restart_breaks_the_connection(&mut server, &conn).await;
    // From here on, every step restarts the server first (from a live connection), so every
    // operation below is the first one on a connection the restart broke.

    restart(&mut server, &conn).await;
    conv.append("s", &turn(2))
        .await
        .expect("conversation.append right after a restart");
    restart(&mut server, &conn).await;
    let mut both = turn(1);
    both.extend(turn(2));
    assert_eq!(
        conv.load("s").await.expect("conversation.load right after a restart"),
        both,
        "both turns, each once"
    );
    restart(&mut server, &conn).await;
    let sessions = conv
        .list_sessions()
        .await
        .expect("conversation.list_sessions right after a restart");
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].session_id, "s");
    assert!(sessions[0].last_used > UNIX_EPOCH + Duration::from_secs(1_600_000_000));

    restart(&mut server, &conn).await;
    ckpt.save("run-2", &paused, b"state-2")
        .await
        .expect("checkpoint.save right after a restart");
    restart(&mut server, &conn).await;
    assert_eq!(
        ckpt.load("run-1").await.expect("checkpoint.load right after a restart"),
        Some(b"state-1".to_vec())
    );
    restart(&mut server, &conn).await;
    assert_eq!(
        ckpt_no_ttl
            .load("run-1")
            .await
            .expect("checkpoint.load (no TTL) right after a restart"),
        Some(b"plain".to_vec())
    );
    restart(&mut server, &conn).await;
    let page = ckpt
        .list(&CheckpointQuery::default())
        .await
        .expect("checkpoint.list right after a restart");
    let ids: Vec<&str> = page.items.iter().map(|i| i.run_id.as_str()).collect();
    assert_eq!(ids, vec!["run-1", "run-2"]);
    assert_eq!(page.items[0].meta, paused);
    restart(&mut server, &conn).await;
    assert_eq!(
        ckpt.purge_expired()
            .await
            .expect("checkpoint.purge_expired right after a restart"),
        0
    );
    restart(&mut server, &conn).await;
    ckpt.delete("run-2")
        .await
        .expect("checkpoint.delete right after a restart");

    restart(&mut server, &conn).await;
    assert_eq!(
        mem.get("summary").await.expect("memory.get right after a restart"),
        Some("요약".to_owned())
    );
    restart(&mut server, &conn).await;
    mem.put("summary", "새 요약")
        .await
        .expect("memory.put right after a restart");
    restart(&mut server, &conn).await;
    mem.delete("other").await.expect("memory.delete right after a restart");
    restart(&mut server, &conn).await;
    conv.delete("gone")
        .await
        .expect("conversation.delete right after a restart");

    // Everything the steps wrote is there, once.
    assert_eq!(conv.load("s").await.unwrap(), both);
    assert_eq!(ckpt.load("run-2").await.unwrap(), None);
    assert_eq!(mem.get("summary").await.unwrap().as_deref(), Some("새 요약"));
}

/// An agent run on the same session after a restart succeeds at the first attempt (no retry in
/// the agent: `RetryConfig::none()`), and the conversation holds each turn once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_run_right_after_a_restart_succeeds() {
    let Some(mut server) = RedisServer::try_start() else {
        return;
    };
    let conn = modu_redis::connect(&server.url()).await.unwrap();
    let conv: Arc<dyn ConversationStore> = Arc::new(RedisConversationStore::new(conn.clone()).with_prefix("a"));
    let ckpt: Arc<dyn CheckpointStore> = Arc::new(RedisCheckpointStore::new(conn.clone()).with_prefix("a"));
    let agent = Agent::builder(ScriptedModel::new().text("first answer").text("second answer"))
        .retry(RetryConfig::none())
        .conversation_store(Arc::clone(&conv))
        .checkpoint_store(Arc::clone(&ckpt))
        .build()
        .unwrap();
    let first = agent.run(AgentRequest::new((), "one").session("s")).await;
    assert!(first.error().is_none(), "{:?}", first.error());

    restart(&mut server, &conn).await;
    let second = agent.run(AgentRequest::new((), "two").session("s")).await;
    assert!(
        second.error().is_none(),
        "the run right after a restart: {:?}",
        second.error()
    );
    assert_eq!(second.output().map(String::as_str), Some("second answer"));
    let texts: Vec<String> = conv.load("s").await.unwrap().iter().map(Message::text).collect();
    assert_eq!(texts, vec!["one", "first answer", "two", "second answer"]);
}

/// The idempotency script directly: the same batch id twice stores one batch; another id
/// stores another batch; the id is remembered for `APPEND_BATCH_TTL`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_batch_id_is_appended_once() {
    let Some(server) = RedisServer::try_start() else { return };
    let conn = modu_redis::connect(&server.url()).await.unwrap();
    let store = RedisConversationStore::new(conn.clone()).with_prefix("b");
    assert!(store.append_with_batch_id("s", "batch-1", &turn(1)).await.unwrap());
    assert!(
        !store.append_with_batch_id("s", "batch-1", &turn(1)).await.unwrap(),
        "a repeated batch id is refused"
    );
    assert!(
        !store.append_with_batch_id("s", "batch-1", &turn(9)).await.unwrap(),
        "whatever the messages"
    );
    assert!(store.append_with_batch_id("s", "batch-2", &turn(2)).await.unwrap());
    let mut want = turn(1);
    want.extend(turn(2));
    assert_eq!(store.load("s").await.unwrap(), want);

    let mut c = conn.clone();
    let pttl: i64 = redis::cmd("PTTL")
        .arg("b:append-batch:batch-1")
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(
        pttl > 0 && pttl <= APPEND_BATCH_TTL.as_millis() as i64,
        "batch id TTL {pttl} ms"
    );
}

/// The ambiguous failure itself: the server runs the append, the connection breaks before the
/// reply arrives; the store retries on a new connection and the batch is stored once. The
/// server ran the append script twice (the original and the retry), which is what a plain
/// RPUSH retry would have turned into two copies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_retried_after_an_ambiguous_failure_is_not_duplicated() {
    let Some(server) = RedisServer::try_start() else { return };
    let proxy = CuttingProxy::start(server.port, b"cut-me:append-batch:");
    let conn = modu_redis::connect(&proxy.url()).await.unwrap();
    let store = RedisConversationStore::new(conn.clone())
        .with_prefix("cut-me")
        .with_ttl(Duration::from_secs(3600));
    store.append("s", &turn(1)).await.unwrap();

    let evals_before = command_calls(&server.url(), "eval");
    proxy.arm();
    store
        .append("s", &turn(2))
        .await
        .expect("the append whose reply was lost is retried and succeeds");
    assert_eq!(
        proxy.cuts(),
        1,
        "the proxy cut the connection after the server ran the append"
    );
    assert_eq!(
        command_calls(&server.url(), "eval") - evals_before,
        2,
        "the server ran the append twice: the original and the retry"
    );
    let mut want = turn(1);
    want.extend(turn(2));
    assert_eq!(store.load("s").await.unwrap(), want, "the second turn is stored once");

    // A checkpoint save cut the same way is simply written again.
    let proxy_ckpt = CuttingProxy::start(server.port, b"cut-ckpt:checkpoint-meta:");
    let ckpt = RedisCheckpointStore::new(modu_redis::connect(&proxy_ckpt.url()).await.unwrap()).with_prefix("cut-ckpt");
    proxy_ckpt.arm();
    ckpt.save(
        "run",
        &CheckpointMeta::new("agent", CheckpointStatus::Running),
        b"state",
    )
    .await
    .expect("a save whose reply was lost is retried");
    assert_eq!(proxy_ckpt.cuts(), 1);
    assert_eq!(ckpt.load("run").await.unwrap(), Some(b"state".to_vec()));
    assert_eq!(ckpt.list(&CheckpointQuery::default()).await.unwrap().items.len(), 1);
}

/// The same ambiguous failure for leases: a take whose reply was lost is retried and returns
/// the lease the server made (not "busy": without the take id the retry would find its own
/// lease and leave the key held by nobody for a whole ttl), and a fenced append whose reply
/// was lost is retried and stored once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_take_and_fenced_append_retried_after_an_ambiguous_failure() {
    let Some(server) = RedisServer::try_start() else { return };
    let ttl = Duration::from_secs(60);
    let proxy = CuttingProxy::start(server.port, b"cut-lease:lease-take:");
    let leases = RedisLeaseStore::new(modu_redis::connect(&proxy.url()).await.unwrap()).with_prefix("cut-lease");
    proxy.arm();
    let lease = leases
        .acquire("s", "w1", ttl)
        .await
        .unwrap()
        .expect("the retried take returns the lease the first attempt took");
    assert_eq!(
        proxy.cuts(),
        1,
        "the proxy cut the connection after the server took the lease"
    );
    assert_eq!(lease.token, 1, "one take happened");
    assert!(
        leases.acquire("s", "w2", ttl).await.unwrap().is_none(),
        "the key is held"
    );
    leases.renew(&lease).await.expect("the lease is the live one");

    let proxy_append = CuttingProxy::start(server.port, b"cut-lease:append-batch:");
    let conv =
        RedisConversationStore::new(modu_redis::connect(&proxy_append.url()).await.unwrap()).with_prefix("cut-lease");
    proxy_append.arm();
    conv.append_fenced("s", &turn(1), &lease.fence())
        .await
        .expect("the fenced append whose reply was lost is retried and succeeds");
    assert_eq!(proxy_append.cuts(), 1);
    assert_eq!(conv.load("s").await.unwrap(), turn(1), "stored once");
}
