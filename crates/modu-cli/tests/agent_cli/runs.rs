//! `modu resume` and `modu runs`: continuing failed and paused runs, listing and purging them.

use modu_testing::{MockOpenAiServer, MockReply};
use serde_json::{Value, json};

use crate::support::{assert_recent, everything_config, failed_run, modu, output, text, with_stdin};

/// The run id in `error: run RUN_ID is waiting for approval …`.
fn paused_run_of(stderr: &str) -> String {
    let line = stderr.lines().find(|l| l.starts_with("error: run ")).unwrap();
    line.strip_prefix("error: run ")
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_continues_a_failed_run_from_its_checkpoint() {
    let mock = MockOpenAiServer::start().await.unwrap();
    mock.push(MockReply::Error {
        status: 503,
        body: json!({"error": {"message": "the model is loading"}}),
        headers: Vec::new(),
    });
    let dir = tempfile::tempdir().unwrap();
    let failed = output(
        modu(dir.path(), &mock.base_url())
            .env("MODU_LIMITS__RETRY_ATTEMPTS", "1")
            .args(["run", "--json", "--session", "s", "Count to 3"]),
    )
    .await;
    assert_eq!(failed.status.code(), Some(1), "{}", text(&failed.stderr));
    let result: Value = serde_json::from_slice(&failed.stdout).unwrap();
    let run_id = result["run_id"].as_str().unwrap().to_owned();
    assert_eq!(result["error"]["type"], json!("model"), "{result}");
    let stderr = text(&failed.stderr);
    assert!(
        stderr.contains(&format!("hint: continue this run with `modu resume {run_id}`\n")),
        "{stderr}"
    );

    // Another process picks the run up from .modu/modu.db; the server answers now.
    let resumed = output(modu(dir.path(), &mock.base_url()).args(["resume", &run_id])).await;
    assert!(resumed.status.success(), "{}", text(&resumed.stderr));
    assert_eq!(text(&resumed.stdout), "You said: Count to 3\n");

    let again = output(modu(dir.path(), &mock.base_url()).args(["resume", &run_id])).await;
    assert_eq!(again.status.code(), Some(1));
    assert_eq!(
        text(&again.stderr),
        format!("error: no checkpoint for run {run_id} in sqlite .modu/modu.db (it finished, or never ran here)\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_paused_for_approval_is_answered_by_resume() {
    let Some(script) = modu_testing::service_env("MODU_MCP_EVERYTHING") else {
        return;
    };
    let mock = MockOpenAiServer::start().await.unwrap();
    mock.push(MockReply::ToolCalls(vec![(
        "mcp_call_tool".into(),
        json!({"tool_name": "everything__get-sum", "arguments": {"a": 2, "b": 3}}).to_string(),
    )]));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("modu.toml"),
        everything_config(&script, "require_approval = [\"everything__get-sum\"]"),
    )
    .unwrap();
    // No answer on stdin: the run stays paused.
    let paused = output(modu(dir.path(), &mock.base_url()).args(["run", "--session", "p", "What is 2 + 3?"])).await;
    assert_eq!(paused.status.code(), Some(1));
    let stderr = text(&paused.stderr);
    let run_id = paused_run_of(&stderr);
    assert!(
        stderr.contains(&format!(
            "error: run {run_id} is waiting for approval of everything__get-sum; answer with `modu resume {run_id}`\n"
        )),
        "{stderr}"
    );

    // `runs list` shows the paused run; `runs show` names the call that waits.
    let list = output(modu(dir.path(), &mock.base_url()).args(["runs", "list"])).await;
    assert!(list.status.success(), "{}", text(&list.stderr));
    let listed = text(&list.stdout);
    let columns: Vec<&str> = listed.trim_end().split('\t').collect();
    assert_eq!(columns[..4], [run_id.as_str(), "paused", "modu", "p"], "{listed:?}");
    assert_recent(columns[4]);
    let show = output(modu(dir.path(), &mock.base_url()).args(["runs", "show", &run_id])).await;
    let shown = text(&show.stdout);
    assert!(show.status.success(), "{}", text(&show.stderr));
    assert!(shown.contains("status:   paused\n"), "{shown}");
    assert!(
        shown.contains("progress: turns 1, tool calls 1, messages 2\n"),
        "{shown}"
    );
    assert!(shown.contains("pending approvals:\n  "), "{shown}");
    assert!(shown.contains(" everything__get-sum({\"a\":2,\"b\":3})\n"), "{shown}");
    let show = output(modu(dir.path(), &mock.base_url()).args(["runs", "show", "--json", &run_id])).await;
    let shown: Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(shown["status"], "paused");
    assert_eq!(shown["pending_approvals"][0]["tool_name"], "everything__get-sum");
    assert_eq!(shown["pending_approvals"][0]["arguments"], json!({"a": 2, "b": 3}));
    assert!(!shown["pending_approvals"][0]["call_id"].as_str().unwrap().is_empty());

    let resumed = with_stdin(modu(dir.path(), &mock.base_url()).args(["resume", &run_id]), "yes\n").await;
    assert_eq!(mock.requests().len(), 2, "the resumed run asked the model once more");
    let stderr = text(&resumed.stderr);
    assert!(resumed.status.success(), "{stderr}");
    assert!(
        stderr.contains("approve everything__get-sum({\"a\":2,\"b\":3})? [y/N] yes\n"),
        "{stderr}"
    );
    assert!(stderr.contains("→ everything__get-sum({\"a\":2,\"b\":3})"), "{stderr}");
    let stdout = text(&resumed.stdout);
    assert!(
        stdout.starts_with("The tool answered: ") && stdout.contains('5'),
        "{stdout}"
    );
    // The finished run left no checkpoint.
    let list = output(modu(dir.path(), &mock.base_url()).args(["runs", "list"])).await;
    assert_eq!(text(&list.stdout), "", "{}", text(&list.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_list_show_and_delete_the_checkpoints_in_sqlite() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let empty = output(modu(dir.path(), &mock.base_url()).args(["runs", "list"])).await;
    assert!(empty.status.success(), "{}", text(&empty.stderr));
    assert_eq!(text(&empty.stdout), "");
    assert_eq!(text(&empty.stderr), "no runs in sqlite .modu/modu.db\n");

    let first = failed_run(dir.path(), &mock, "s1", &[]).await;
    let second = failed_run(dir.path(), &mock, "s2", &[]).await;
    let mut ids = [first.clone(), second.clone()];
    ids.sort();

    // One line per run, ascending by run id: id, status, agent, session, updated at.
    let list = output(modu(dir.path(), &mock.base_url()).args(["runs", "list"])).await;
    assert!(list.status.success(), "{}", text(&list.stderr));
    let listed = text(&list.stdout);
    let rows: Vec<Vec<&str>> = listed.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), 2, "{listed:?}");
    for (row, id) in rows.iter().zip(&ids) {
        let session = if *id == first { "s1" } else { "s2" };
        assert_eq!(row[..4], [id.as_str(), "failed", "modu", session], "{listed:?}");
        assert_recent(row[4]);
    }
    let list = output(modu(dir.path(), &mock.base_url()).args(["runs", "list", "--json"])).await;
    let runs: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 2, "{runs}");
    assert_eq!(runs[0]["run_id"], json!(ids[0]));
    assert_eq!(runs[0]["status"], "failed");
    assert_eq!(runs[0]["agent"], "modu");
    assert_eq!(runs[0]["updated_at"], json!(rows[0][4]));

    let show = output(modu(dir.path(), &mock.base_url()).args(["runs", "show", &first])).await;
    assert!(show.status.success(), "{}", text(&show.stderr));
    let shown = text(&show.stdout);
    assert!(
        shown.starts_with(&format!(
            "run:      {first}\nstatus:   failed\nagent:    modu\nsession:  s1\nupdated:  "
        )),
        "{shown}"
    );
    assert!(shown.contains("pending approvals: none\n"), "{shown}");
    let show = output(modu(dir.path(), &mock.base_url()).args(["runs", "show", "--json", &first])).await;
    let shown: Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(shown["status"], "failed");
    assert_eq!(shown["session_id"], "s1");
    assert_eq!(shown["pending_approvals"], json!([]));
    assert_eq!(shown["messages"], json!(1), "the user message: {shown}");

    let delete = output(modu(dir.path(), &mock.base_url()).args(["runs", "delete", &first])).await;
    assert!(delete.status.success(), "{}", text(&delete.stderr));
    assert_eq!(text(&delete.stderr), format!("deleted run {first}\n"));
    let list = output(modu(dir.path(), &mock.base_url()).args(["runs", "list"])).await;
    assert_eq!(text(&list.stdout).lines().count(), 1);
    assert!(text(&list.stdout).starts_with(&format!("{second}\t")));
    // The deleted run is gone: show, delete and resume all say so.
    let missing = format!(
        "error: no checkpoint for run {first} in sqlite .modu/modu.db (it finished, expired, or never ran here)\n"
    );
    for args in [["runs", "show", first.as_str()], ["runs", "delete", first.as_str()]] {
        let out = output(modu(dir.path(), &mock.base_url()).args(args)).await;
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(text(&out.stderr), missing, "{args:?}");
    }
    let resume = output(modu(dir.path(), &mock.base_url()).args(["resume", &first])).await;
    assert_eq!(resume.status.code(), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_purge_removes_expired_checkpoints() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ttl = [("MODU_STORE__TTL_SECONDS", "1")];
    failed_run(dir.path(), &mock, "s", &ttl).await;
    let list = output(modu(dir.path(), &mock.base_url()).envs(ttl).args(["runs", "list"])).await;
    assert_eq!(text(&list.stdout).lines().count(), 1, "{}", text(&list.stderr));
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    // Expired: not listed, and purge removes it.
    let list = output(modu(dir.path(), &mock.base_url()).envs(ttl).args(["runs", "list"])).await;
    assert_eq!(text(&list.stdout), "");
    let purge = output(modu(dir.path(), &mock.base_url()).envs(ttl).args(["runs", "purge"])).await;
    assert!(purge.status.success(), "{}", text(&purge.stderr));
    assert_eq!(
        text(&purge.stderr),
        "purged 1 expired checkpoint(s) from sqlite .modu/modu.db\n"
    );
    let again = output(modu(dir.path(), &mock.base_url()).envs(ttl).args(["runs", "purge"])).await;
    assert_eq!(
        text(&again.stderr),
        "purged 0 expired checkpoint(s) from sqlite .modu/modu.db\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_in_the_memory_store_does_not_point_at_modu_resume() {
    // The memory store's checkpoint ends with the command: `modu resume` would not find it.
    let mock = MockOpenAiServer::start().await.unwrap();
    mock.push(MockReply::Error {
        status: 503,
        body: json!({"error": {"message": "the model is loading"}}),
        headers: Vec::new(),
    });
    let dir = tempfile::tempdir().unwrap();
    let failed = output(
        modu(dir.path(), &mock.base_url())
            .env("MODU_LIMITS__RETRY_ATTEMPTS", "1")
            .env("MODU_STORE__KIND", "memory")
            .args(["run", "Count to 3"]),
    )
    .await;
    let stderr = text(&failed.stderr);
    assert_eq!(failed.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("error: "), "{stderr}");
    assert!(!stderr.contains("modu resume"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_show_reads_a_run_without_the_api_key_the_config_names() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("modu.toml"),
        "[model]\napi_key_env = \"MODU_TEST_RUNS_KEY\"\n",
    )
    .unwrap();
    let run_id = failed_run(dir.path(), &mock, "s", &[("MODU_TEST_RUNS_KEY", "sk-test")]).await;

    // Reading a stored run calls no model: the key need not be in this shell.
    let show = output(modu(dir.path(), &mock.base_url()).args(["runs", "show", &run_id])).await;
    assert!(show.status.success(), "{}", text(&show.stderr));
    assert!(text(&show.stdout).contains(&run_id), "{}", text(&show.stdout));
}
