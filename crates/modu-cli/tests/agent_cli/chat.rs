//! `modu chat`: a conversation on stdin that answers MCP tool approvals.

use modu_testing::{MockOpenAiServer, MockReply};
use serde_json::json;

use crate::support::{everything_config, modu, text, transcript, with_stdin};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_through_stdin_answers_an_mcp_approval() {
    let Some(script) = modu_testing::service_env("MODU_MCP_EVERYTHING") else {
        return;
    };
    let mock = MockOpenAiServer::start().await.unwrap();
    // Turn 1: a plain answer. Turn 2: the model calls everything__echo, which needs approval.
    mock.push(MockReply::Text("Hello!".into()));
    mock.push(MockReply::ToolCalls(vec![(
        "mcp_call_tool".into(),
        json!({"tool_name": "everything__echo", "arguments": {"message": "hi from chat"}}).to_string(),
    )]));
    mock.push(MockReply::Text("The server echoed it.".into()));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("modu.toml"),
        everything_config(&script, "require_approval = [\"everything__echo\"]"),
    )
    .unwrap();
    let out = with_stdin(
        modu(dir.path(), &mock.base_url()).arg("chat"),
        "hi\n\nplease echo\ny\n/exit\nnever sent\n",
    )
    .await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "Hello!\nThe server echoed it.\n", "{stderr}");
    assert!(
        stderr.contains("→ everything__echo({\"message\":\"hi from chat\"})"),
        "the tool call is shown: {stderr}"
    );
    assert!(
        stderr.contains("approve everything__echo({\"message\":\"hi from chat\"})? [y/N] "),
        "{stderr}"
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), 3, "/exit ends the chat");
    // The approved call ran on the real server; the model saw its answer.
    let last = transcript(&requests[2]);
    assert!(
        last.iter()
            .any(|m| m.starts_with("tool: ") && m.contains("hi from chat")),
        "{last:?}"
    );
    // Both turns are in one session, and the system prompt came from modu.toml.
    assert_eq!(last[0], "system: You are terse.");
    assert!(last.contains(&"user: hi".to_owned()) && last.contains(&"assistant: Hello!".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_rejection_is_sent_to_the_model() {
    let Some(script) = modu_testing::service_env("MODU_MCP_EVERYTHING") else {
        return;
    };
    let mock = MockOpenAiServer::start().await.unwrap();
    mock.push(MockReply::ToolCalls(vec![(
        "mcp_call_tool".into(),
        json!({"tool_name": "everything__echo", "arguments": {"message": "no"}}).to_string(),
    )]));
    mock.push(MockReply::Text("Understood.".into()));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("modu.toml"),
        everything_config(&script, "require_approval = [\"*\"]"),
    )
    .unwrap();
    let out = with_stdin(modu(dir.path(), &mock.base_url()).arg("chat"), "echo no\nn\n").await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "Understood.\n");
    assert!(
        stderr.contains("approve everything__echo({\"message\":\"no\"})? [y/N] n\n✗ everything__echo rejected\n"),
        "the piped answer is echoed, the rejection shown: {stderr}"
    );
    assert!(!stderr.contains("failed"), "{stderr}");
    let last = transcript(&mock.requests()[1]);
    assert!(
        last.iter()
            .any(|m| m.starts_with("tool: ") && m.contains("the user said no")),
        "{last:?}"
    );
}

/// `--session ID` says whether it continues a stored conversation: a mistyped id starts a new
/// session, and the line says so instead of going on as if the history were there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_says_whether_a_given_session_is_new_or_continued() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let chat = |session: &str| {
        let mut cmd = modu(dir.path(), &mock.base_url());
        cmd.args(["chat", "--session", session]);
        cmd
    };
    let first = with_stdin(&mut chat("project-x"), "hello\n").await;
    let stderr = text(&first.stderr);
    assert!(first.status.success(), "{stderr}");
    assert!(
        stderr.contains("session: project-x (new: nothing is stored under this id; type /exit"),
        "{stderr}"
    );
    // The same id again continues the stored turn (the user message and the answer).
    let again = with_stdin(&mut chat("project-x"), "/exit\n").await;
    let stderr = text(&again.stderr);
    assert!(again.status.success(), "{stderr}");
    assert!(
        stderr.contains("session: project-x (continued: 2 stored messages; type /exit"),
        "{stderr}"
    );
    // A mistyped id is named as new.
    let typo = with_stdin(&mut chat("project-y"), "/exit\n").await;
    assert!(
        text(&typo.stderr).contains("session: project-y (new: nothing is stored under this id;"),
        "{}",
        text(&typo.stderr)
    );
}
