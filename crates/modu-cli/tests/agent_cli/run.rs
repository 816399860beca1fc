//! `modu run`: streaming, reasoning, `--json`, the progress indicator, retries and Plan-and-Execute.

use modu_testing::{MockOpenAiServer, MockReply};
use serde_json::{Value, json};

use crate::support::{command, everything_config, fed, modu, output, session_of, text, transcript, with_stdin};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_streams_the_answer_and_names_a_new_session() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = output(modu(dir.path(), &mock.base_url()).args(["run", "Say hello"])).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "You said: Say hello\n");
    let session = session_of(&stderr);
    assert_eq!(session.len(), 32, "{stderr}");
    // The default store: SQLite under .modu/.
    assert!(dir.path().join(".modu/modu.db").is_file());
    // The request streamed (the text arrived as deltas).
    assert_eq!(mock.requests()[0]["stream"], json!(true));
}

/// One `chat.completion.chunk` of a raw SSE reply.
fn chunk(delta: Value, finish: Option<&str>) -> String {
    json!({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "mock-model",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    .to_string()
}

/// A reasoning model's stream as vLLM sends it: `reasoning_content` deltas, then the answer.
fn reasoning_reply() -> MockReply {
    MockReply::RawSse {
        events: vec![
            chunk(json!({"role": "assistant", "reasoning_content": "Weighing "}), None),
            chunk(json!({"reasoning_content": "the greeting."}), None),
            chunk(json!({"content": "Hello."}), None),
            chunk(json!({}), Some("stop")),
            "[DONE]".into(),
        ],
        drop_after: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_shows_reasoning_on_stderr_unless_hidden() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    mock.push(reasoning_reply());
    let out = output(modu(dir.path(), &mock.base_url()).args(["run", "hi"])).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "Hello.\n", "the answer alone on stdout");
    assert!(stderr.contains("Weighing the greeting.\n"), "{stderr}");
    assert!(
        !stderr.contains('\x1b'),
        "no escape codes when stderr is not a terminal: {stderr:?}"
    );

    mock.push(reasoning_reply());
    let out = output(modu(dir.path(), &mock.base_url()).args(["run", "--hide-reasoning", "hi"])).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(stdout, "Hello.\n");
    assert!(!stderr.contains("Weighing"), "{stderr}");
}

/// An answer the server stopped at its output limit (`finish_reason: "length"`) is printed as
/// far as it goes, and stderr says it was cut and what to raise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_says_when_the_answer_was_cut_at_the_output_limit() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    mock.push(MockReply::RawSse {
        events: vec![
            chunk(json!({"role": "assistant", "content": "Hello, and"}), None),
            chunk(json!({}), Some("length")),
            "[DONE]".into(),
        ],
        drop_after: None,
    });
    let out = output(modu(dir.path(), &mock.base_url()).args(["run", "hi"])).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "Hello, and\n");
    assert!(
        stderr.contains("cut at the model's output limit") && stderr.contains("max_tokens"),
        "{stderr}"
    );

    // A whole answer says nothing of a limit.
    mock.push(reasoning_reply());
    let out = output(modu(dir.path(), &mock.base_url()).args(["run", "hi"])).await;
    assert!(!text(&out.stderr).contains("output limit"), "{}", text(&out.stderr));
}

/// What the model writes before it calls tools and the answer after them are two lines, not
/// one run-on line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_before_a_tool_call_and_the_answer_after_it_are_separate_lines() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    mock.push(MockReply::RawSse {
        events: vec![
            chunk(json!({"role": "assistant", "content": "Let me check."}), None),
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                        "function": {"name": "lookup", "arguments": "{}"}}]}),
                None,
            ),
            chunk(json!({}), Some("tool_calls")),
            "[DONE]".into(),
        ],
        drop_after: None,
    });
    mock.push(MockReply::Text("It is sunny.".into()));
    let out = output(modu(dir.path(), &mock.base_url()).args(["run", "weather?"])).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "Let me check.\nIt is sunny.\n", "{stderr}");
    assert_eq!(mock.requests().len(), 2, "the tool's error went back to the model");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_json_prints_the_agent_result() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = output(
        modu(dir.path(), &mock.base_url())
            .env("MODU_STORE__KIND", "memory")
            .args(["run", "--json", "--session", "s1", "What is 2 + 3?"]),
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["output"], json!("You said: What is 2 + 3?"));
    assert_eq!(result["agent"], json!("modu"));
    assert!(result["error"].is_null());
    assert_eq!(result["messages"].as_array().unwrap().len(), 2, "{result}");
    assert!(!result["run_id"].as_str().unwrap().is_empty());
    // MODU_STORE__KIND=memory: nothing written to disk.
    assert!(!dir.path().join(".modu").exists());

    // [output] mode = "json" by variable, and the prompt from stdin with `-`.
    let piped = with_stdin(
        modu(dir.path(), &mock.base_url())
            .env("MODU_STORE__KIND", "memory")
            .env("MODU_OUTPUT__MODE", "json")
            .args(["run", "--session", "s2", "-"]),
        "a prompt from a pipe",
    )
    .await;
    assert!(piped.status.success(), "{}", text(&piped.stderr));
    let result: Value = serde_json::from_slice(&piped.stdout).unwrap();
    assert_eq!(result["output"], json!("You said: a prompt from a pipe"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_progress_indicator_shows_on_a_terminal_only() {
    let slow = || {
        MockReply::Delayed(
            std::time::Duration::from_millis(700),
            Box::new(MockReply::Text("done".into())),
        )
    };
    let mock = MockOpenAiServer::start().await.unwrap();
    mock.push(slow());
    mock.push(slow());
    let dir = tempfile::tempdir().unwrap();
    // Piped: no spinner.
    let piped = output(
        modu(dir.path(), &mock.base_url())
            .env("MODU_STORE__KIND", "memory")
            .args(["run", "--session", "s", "hi"]),
    )
    .await;
    assert!(piped.status.success());
    // Only the note that the (in-memory) session is new: no spinner.
    assert_eq!(
        text(&piped.stderr),
        "session: s (new: nothing is stored under this id)\n"
    );
    assert_eq!(text(&piped.stdout), "done\n");
    // Under a pseudo-terminal (util-linux `script`, in every Debian base image): a spinner on
    // stderr until the first token, then erased.
    let line = format!("{} run --session s hi", env!("CARGO_BIN_EXE_modu"));
    let tty = output(
        command("script", dir.path(), &mock.base_url())
            .env("MODU_STORE__KIND", "memory")
            .args(["-qec", &line, "/dev/null"]),
    )
    .await;
    let screen = text(&tty.stdout);
    assert!(tty.status.success(), "{screen}");
    assert!(screen.contains("thinking…"), "{screen:?}");
    assert!(
        screen.contains("\r\x1b[2Kdone"),
        "the spinner is erased before the answer: {screen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_and_execute_from_the_config_streams_only_the_final_answer() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("modu.toml"),
        "[agent]\npolicy = \"plan_and_execute\"\n\n[limits]\nmax_steps = 2\n",
    )
    .unwrap();
    for _ in 0..2 {
        mock.push(MockReply::Text(
            json!({"steps": [{"description": "Greet", "allowed_tools": []}]}).to_string(),
        ));
        mock.push(MockReply::Text(
            json!({"status": "completed", "result": "greeted"}).to_string(),
        ));
        mock.push(MockReply::Text("Hello!".into()));
    }
    let out = output(modu(dir.path(), &mock.base_url()).args(["run", "Say hello"])).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The plan and the step result are internal: only FINALIZE's tokens reach stdout.
    assert_eq!(text(&out.stdout), "Hello!\n");
    let requests = mock.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0]["response_format"]["json_schema"]["name"], "PlanDraft");
    assert_eq!(
        requests[0]["response_format"]["json_schema"]["schema"]["properties"]["steps"]["maxItems"],
        2
    );
    assert_eq!(requests[1]["response_format"]["json_schema"]["name"], "StepResult");
    assert!(requests[2].get("response_format").is_none());

    let out = output(modu(dir.path(), &mock.base_url()).args(["run", "--json", "Say hello"])).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["status"], "completed");
    assert_eq!(result["output"], "Hello!");
    // A strict run's JSON carries its plan report.
    assert_eq!(result["plan"]["plan"]["steps"][0]["status"], "completed");

    // Resuming the finished run (its DONE state stays in .modu/modu.db) prints the stored answer
    // without asking the model again.
    let asked = mock.requests().len();
    let run_id = result["run_id"].as_str().unwrap();
    let out = output(modu(dir.path(), &mock.base_url()).args(["resume", run_id])).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "Hello!\n");
    assert_eq!(mock.requests().len(), asked, "no second FINALIZE");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_and_execute_plans_with_the_mcp_tools_themselves() {
    let Some(script) = modu_testing::service_env("MODU_MCP_EVERYTHING") else {
        return;
    };
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = everything_config(&script, "").replace("[agent]\n", "[agent]\npolicy = \"plan_and_execute\"\n");
    std::fs::write(dir.path().join("modu.toml"), config).unwrap();
    mock.push(MockReply::Text(
        json!({"steps": [{"description": "Echo hello", "allowed_tools": ["everything__echo"]}]}).to_string(),
    ));
    mock.push(MockReply::ToolCalls(vec![(
        "everything__echo".into(),
        json!({"message": "hello"}).to_string(),
    )]));
    mock.push(MockReply::Text(
        json!({"status": "completed", "result": "echoed hello"}).to_string(),
    ));
    mock.push(MockReply::Text("Echoed: hello".into()));
    let out = output(modu(dir.path(), &mock.base_url()).args(["run", "Echo hello"])).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "Echoed: hello\n");
    assert!(
        stderr.contains("→ everything__echo({\"message\":\"hello\"})"),
        "{stderr}"
    );
    let requests = mock.requests();
    // The planner's schema lists server-everything's tools by name; the step offers only echo.
    let allowed = &requests[0]["response_format"]["json_schema"]["schema"]["properties"]["steps"]["items"]["properties"]
        ["allowed_tools"]["items"]["enum"];
    assert!(
        allowed.as_array().unwrap().iter().any(|t| t == "everything__echo"),
        "{allowed}"
    );
    let act: Vec<&str> = requests[1]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(act, ["everything__echo"]);
    // The step-result request saw the echo's result.
    assert!(
        transcript(&requests[2])
            .iter()
            .any(|m| m.starts_with("tool: ") && m.contains("hello"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_call_cut_mid_answer_is_retried_on_a_new_line() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let chunk = json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "mock-model",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}, "finish_reason": null}]
    });
    mock.push(MockReply::RawSse {
        events: vec![chunk.to_string(), chunk.to_string()],
        drop_after: Some(1),
    });
    mock.push(MockReply::Text("Hello world".into()));
    let out = output(
        modu(dir.path(), &mock.base_url())
            .env("MODU_STORE__KIND", "memory")
            .args(["run", "Say hello"]),
    )
    .await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout, "Hel\nHello world\n");
    assert!(
        stderr.contains("(the model server failed mid-answer; retrying)"),
        "{stderr}"
    );
    assert_eq!(mock.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_into_a_closed_pipe_is_not_a_panic() {
    // `modu run --json … | head -1`, `modu sessions list | head -1`: the reader has gone
    // before everything is written.
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    for args in [&["run", "--json", "Say hello"][..], &["sessions", "list"][..]] {
        let mut cmd = modu(dir.path(), &mock.base_url());
        cmd.args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        drop(child.stdout.take());
        let out = fed(child, "").await;
        let stderr = text(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
    }
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_that_cannot_be_written_ends_the_run_with_an_error() {
    // `modu run … > file` on a full disk: the answer is lost, which is not a success.
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (args, input) in [(&["run", "Say hello"][..], ""), (&["chat"][..], "hi\nagain\n")] {
        let mut cmd = modu(dir.path(), &mock.base_url());
        cmd.args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::fs::File::create("/dev/full").unwrap())
            .stderr(std::process::Stdio::piped());
        let out = fed(cmd.spawn().unwrap(), input).await;
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.ends_with("error: cannot write to stdout: No space left on device (os error 28)\n"),
            "{args:?}: {stderr}"
        );
    }
    // The chat ended at its first answer: `again` was never sent.
    assert_eq!(mock.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_into_a_closed_pipe_stops_the_run_quietly() {
    // `modu run "…" | head -c 0`: the reader has gone before the answer streams; the run stops
    // (it did not finish: exit code 1) without an error line.
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = modu(dir.path(), &mock.base_url());
    cmd.args(["run", "Say hello"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    drop(child.stdout.take());
    let out = fed(child, "").await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("error") && !stderr.contains("panicked"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_prompt_is_a_usage_error_and_asks_no_model() {
    // `modu run "$UNSET"`, or `-` over an empty file: a model request about nothing.
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (args, stdin, said) in [
        (&["run", ""][..], "", "error: the prompt is empty"),
        (&["run", " \n"][..], "", "error: the prompt is empty"),
        (&["run", "-"][..], "\n", "error: the prompt read from stdin is empty"),
    ] {
        let out = with_stdin(modu(dir.path(), &mock.base_url()).args(args), stdin).await;
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with(said), "{args:?}: {stderr}");
    }
    assert!(mock.requests().is_empty(), "a model request was made");
}
