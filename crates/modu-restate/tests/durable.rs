//! Durable runs against a real restate-server (`MODU_RESTATE_SERVER`), with worker processes
//! (the `durable_worker` example) and the OpenAI mock server as the model.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

mod common;

use std::time::{Duration, Instant};

use common::{Restate, Worker, cancel_and_attach, free_port, ledger, send_run, server_bin, wait_for_approvals};
use modu_testing::{MockOpenAiServer, MockReply};
use serde_json::json;

/// One Restate server at a time (2 cores; each test starts its own server and workers).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Setup {
    restate: Restate,
    mock: MockOpenAiServer,
    worker: Worker,
    ledger: std::path::PathBuf,
    worker_log: std::path::PathBuf,
}

async fn setup(bin: &str, slow_ms: u64) -> Setup {
    let restate = Restate::start(bin).await;
    let mock = MockOpenAiServer::start().await.unwrap();
    let ledger = restate.dir.path().join("ledger");
    let worker_log = restate.dir.path().join("worker.log");
    let worker = Worker::start(free_port(), &mock.base_url(), &ledger, slow_ms, &worker_log).await;
    restate.register(&format!("http://127.0.0.1:{}", worker.port)).await;
    Setup {
        restate,
        mock,
        worker,
        ledger,
        worker_log,
    }
}

fn calls(mock: &MockOpenAiServer) -> usize {
    mock.requests().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_completes_through_restate_and_the_session_keeps_its_history() {
    let Some(bin) = server_bin() else { return };
    let _serial = SERIAL.lock().await;
    let s = setup(&bin, 10).await;
    s.mock.push(MockReply::ToolCalls(vec![("record".into(), "{}".into())]));
    s.mock.push(MockReply::Text("all done".into()));

    let out = s.restate.call("alice", "run", json!({"message": "hi"})).await;
    assert_eq!(out["output"], "all done", "{out}");
    assert_eq!(out["error"], serde_json::Value::Null);
    assert_eq!(calls(&s.mock), 2);
    let lines = ledger(&s.ledger);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0].2, "record");
    assert_eq!(lines[0].0, out["run_id"].as_str().unwrap(), "the tool saw the run's id");

    // The second run of the session sees the first one's conversation.
    s.mock.push(MockReply::Text("second answer".into()));
    let out = s.restate.call("alice", "run", json!({"message": "again"})).await;
    assert_eq!(out["output"], "second answer", "{out}");
    let sent = serde_json::to_string(&s.mock.requests()[2]["messages"]).unwrap();
    assert!(
        sent.contains("\"hi\"") && sent.contains("all done") && sent.contains("again"),
        "{sent}"
    );
    let history = s.restate.call("alice", "history", json!(null)).await;
    // user, assistant (tool call), tool, assistant, user, assistant
    assert_eq!(history.as_array().unwrap().len(), 6, "{history}");
    // Another session starts empty.
    let other = s.restate.call("bob", "history", json!(null)).await;
    assert_eq!(other, json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_is_replaced_and_the_run_repeats_no_finished_step() {
    let Some(bin) = server_bin() else { return };
    let _serial = SERIAL.lock().await;
    let mut s = setup(&bin, 3000).await;
    s.mock.push(MockReply::ToolCalls(vec![("record".into(), "{}".into())]));
    s.mock.push(MockReply::ToolCalls(vec![("slow".into(), "{}".into())]));
    s.mock.push(MockReply::Text("finished".into()));

    let ingress = s.restate.ingress_url();
    let http = s.restate.http.clone();
    let run = tokio::spawn(async move {
        http.post(format!("{ingress}/ModuSession/carol/run"))
            .json(&json!({"message": "go"}))
            .send()
            .await
            .unwrap()
            .json::<serde_json::Value>()
            .await
            .unwrap()
    });
    // Kill the worker while `slow` works: `record` and two model calls have finished.
    let started = Instant::now();
    while !ledger(&s.ledger).iter().any(|l| l.2 == "slow" && l.3 == "start") {
        assert!(started.elapsed() < Duration::from_secs(30), "slow never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    s.worker.kill();
    let killed = Instant::now();
    assert_eq!(calls(&s.mock), 2);
    // A new worker process on the deployment's address.
    let port = s.worker.port;
    s.worker = Worker::start(port, &s.mock.base_url(), &s.ledger, 300, &s.worker_log).await;

    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .unwrap()
        .unwrap();
    let recovered = killed.elapsed();
    assert_eq!(
        out["output"],
        "finished",
        "{out}\nworker log:\n{}",
        std::fs::read_to_string(&s.worker_log).unwrap_or_default()
    );
    assert_eq!(calls(&s.mock), 3, "no finished model call was repeated");
    let lines = ledger(&s.ledger);
    let count = |tool: &str, phase: &str| lines.iter().filter(|l| l.2 == tool && l.3 == phase).count();
    assert_eq!(
        count("record", "done"),
        1,
        "the finished tool call did not run again: {lines:?}"
    );
    // The call killed mid-execution ran again (at least once), with the same run and call ids.
    assert_eq!(count("slow", "start"), 2, "{lines:?}");
    assert_eq!(count("slow", "done"), 1, "{lines:?}");
    let starts: Vec<_> = lines.iter().filter(|l| l.2 == "slow").map(|l| (&l.0, &l.1)).collect();
    assert!(starts.windows(2).all(|w| w[0] == w[1]), "{starts:?}");
    println!("recovery: the run finished {recovered:?} after the kill (the new worker's slow call works 300 ms)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_are_awakeables_resolved_over_http() {
    let Some(bin) = server_bin() else { return };
    let _serial = SERIAL.lock().await;
    let s = setup(&bin, 10).await;

    // Approved through Restate's awakeable endpoint.
    s.mock
        .push(MockReply::ToolCalls(vec![("approve_me".into(), "{}".into())]));
    s.mock.push(MockReply::Text("it ran".into()));
    let ingress = s.restate.ingress_url();
    let http = s.restate.http.clone();
    let run = tokio::spawn(async move {
        let r = http
            .post(format!("{ingress}/ModuSession/dave/run"))
            .json(&json!({"message": "please"}));
        r.send().await.unwrap().json::<serde_json::Value>().await.unwrap()
    });
    let pending = wait_for_approvals(&s.restate, "dave").await;
    assert_eq!(pending[0]["request"]["tool_name"], "approve_me", "{pending}");
    assert!(ledger(&s.ledger).is_empty(), "the call waits for its approval");
    let id = pending[0]["awakeable_id"].as_str().unwrap();
    let r = s
        .restate
        .http
        .post(format!("{}/restate/awakeables/{id}/resolve", s.restate.ingress_url()))
        .json(&json!({"decision": "approved"}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let out = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out["output"], "it ran", "{out}");
    assert_eq!(ledger(&s.ledger).len(), 1);
    assert_eq!(s.restate.call("dave", "approvals", json!(null)).await, json!([]));

    // Rejected through the object's `decide` handler: the call does not run.
    s.mock
        .push(MockReply::ToolCalls(vec![("approve_me".into(), "{}".into())]));
    s.mock.push(MockReply::Text("understood".into()));
    let ingress = s.restate.ingress_url();
    let http = s.restate.http.clone();
    let run = tokio::spawn(async move {
        let r = http
            .post(format!("{ingress}/ModuSession/erin/run"))
            .json(&json!({"message": "please"}));
        r.send().await.unwrap().json::<serde_json::Value>().await.unwrap()
    });
    let pending = wait_for_approvals(&s.restate, "erin").await;
    let call_id = pending[0]["request"]["call_id"].as_str().unwrap();
    let unknown = s
        .restate
        .call("erin", "decide", json!({"call_id": "nope", "decision": "approved"}))
        .await;
    assert_eq!(unknown, json!(false));
    let decided = s
        .restate
        .call(
            "erin",
            "decide",
            json!({"call_id": call_id, "decision": "rejected", "message": "no"}),
        )
        .await;
    assert_eq!(decided, json!(true));
    let out = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out["output"], "understood", "{out}");
    assert_eq!(ledger(&s.ledger).len(), 1, "the rejected call did not run");
    let sent = serde_json::to_string(&s.mock.requests()[3]["messages"]).unwrap();
    assert!(sent.contains("no"), "the model saw the rejection: {sent}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_invocation_stops_the_run_and_leaves_the_history() {
    let Some(bin) = server_bin() else { return };
    let _serial = SERIAL.lock().await;
    let s = setup(&bin, 1500).await;
    let log = || std::fs::read_to_string(&s.worker_log).unwrap_or_default();

    // A finished run gives the session a history the cancelled run must leave as it is.
    s.mock.push(MockReply::Text("first answer".into()));
    let out = s.restate.call("jon", "run", json!({"message": "first"})).await;
    assert_eq!(out["output"], "first answer", "{out}");
    let before = s.restate.call("jon", "history", json!(null)).await;
    assert_eq!(before.as_array().unwrap().len(), 2, "{before}");

    // Cancelled while a model call is in flight: the run ends as cancelled, not with a model
    // error, and the reply that comes later is never used.
    s.mock.push(MockReply::Delayed(
        Duration::from_secs(2),
        Box::new(MockReply::ToolCalls(vec![("record".into(), "{}".into())])),
    ));
    let id = send_run(&s.restate, "ivy", "go").await;
    let started = Instant::now();
    while calls(&s.mock) < 2 {
        assert!(started.elapsed() < Duration::from_secs(30), "the model call never came");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, text) = cancel_and_attach(&s.restate, &id).await;
    assert!(
        !status.is_success(),
        "a run cancelled mid model call succeeded: {status} {text}\n{}",
        log()
    );
    assert!(text.contains("cancel"), "{status} {text}");
    tokio::time::sleep(Duration::from_millis(2500)).await; // the late reply has come and gone
    assert_eq!(calls(&s.mock), 2, "the model was asked again after the cancel");
    assert!(ledger(&s.ledger).is_empty(), "no tool ran: {:?}", ledger(&s.ledger));
    assert_eq!(s.restate.call("ivy", "history", json!(null)).await, json!([]));

    // Cancelled while a tool runs: the tool ends (Restate cannot interrupt it), but its result
    // is not handed to the model as an error, the model is not asked again, and the history is
    // left as it was.
    s.mock.push(MockReply::ToolCalls(vec![("slow".into(), "{}".into())]));
    s.mock.push(MockReply::Text("the run went on after the cancel".into()));
    let id = send_run(&s.restate, "jon", "second").await;
    let started = Instant::now();
    while !ledger(&s.ledger).iter().any(|l| l.2 == "slow" && l.3 == "start") {
        assert!(started.elapsed() < Duration::from_secs(30), "slow never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, text) = cancel_and_attach(&s.restate, &id).await;
    assert!(
        !status.is_success(),
        "a run cancelled mid tool call succeeded: {status} {text}\n{}",
        log()
    );
    assert!(text.contains("cancel"), "{status} {text}");
    assert!(!text.contains("restate_retries_exhausted"), "{text}");
    let started = Instant::now();
    while !ledger(&s.ledger).iter().any(|l| l.2 == "slow" && l.3 == "done") {
        assert!(started.elapsed() < Duration::from_secs(30), "slow never ended");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let requests = s.mock.requests();
    assert_eq!(requests.len(), 3, "the model was asked again after the cancel");
    let sent = serde_json::to_string(&requests).unwrap();
    assert!(
        !sent.contains("restate_retries_exhausted") && !sent.contains("cancelled"),
        "the model was told the tool failed: {sent}"
    );
    let lines = ledger(&s.ledger);
    assert_eq!(lines.len(), 2, "slow ran once: {lines:?}");
    assert_eq!(s.restate.call("jon", "history", json!(null)).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_asks_for_input_gets_a_tool_error_instead_of_looping() {
    let Some(bin) = server_bin() else { return };
    let _serial = SERIAL.lock().await;
    let s = setup(&bin, 10).await;
    s.mock.push(MockReply::ToolCalls(vec![("ask_me".into(), "{}".into())]));
    s.mock.push(MockReply::Text("could not ask".into()));

    // Asks are not durable: the call fails with a typed tool error the model sees, once, and the
    // run ends (it resumed itself forever, journaling the ask again and again).
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        s.restate.call("kim", "run", json!({"message": "ask me"})),
    )
    .await
    .expect("the run with an asking tool did not end");
    assert_eq!(out["output"], "could not ask", "{out}");
    let lines = ledger(&s.ledger);
    assert_eq!(lines.len(), 1, "the tool asked once: {lines:?}");
    assert_eq!((lines[0].2.as_str(), lines[0].3.as_str()), ("ask_me", "asked"));
    let requests = s.mock.requests();
    assert_eq!(requests.len(), 2, "two model calls");
    let sent = serde_json::to_string(&requests[1]["messages"]).unwrap();
    assert!(sent.contains("input_not_durable"), "the model was told: {sent}");
    let history = s.restate.call("kim", "history", json!(null)).await;
    assert_eq!(history.as_array().unwrap().len(), 4, "{history}");
}

/// Two tool calls of one model turn run concurrently, each journaled once, and the run goes on
/// to its answer (the journal answers both steps, whichever entry completes first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tool_calls_of_one_turn_are_journaled_and_the_run_answers() {
    let Some(bin) = server_bin() else { return };
    let _serial = SERIAL.lock().await;
    let s = setup(&bin, 10).await;
    s.mock.push(MockReply::ToolCalls(vec![
        ("record".into(), "{}".into()),
        ("record".into(), "{\"note\":\"2\"}".into()),
    ]));
    s.mock.push(MockReply::Text("both recorded".into()));
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        s.restate.call("carol", "run", json!({"message": "record twice"})),
    )
    .await
    .unwrap_or_else(|_| {
        panic!(
            "the run did not end; ledger {:?}, model requests {}",
            ledger(&s.ledger),
            calls(&s.mock)
        )
    });
    assert_eq!(out["output"], "both recorded", "{out}");
    assert_eq!(calls(&s.mock), 2);
    assert_eq!(ledger(&s.ledger).len(), 2, "each tool ran once");
}

/// Two calls of one turn that wait for approval, decided in the opposite order: both run once
/// and the run answers (the run resumes with both results to journal at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_approved_calls_of_one_turn_both_run_and_the_run_answers() {
    let Some(bin) = server_bin() else { return };
    let _serial = SERIAL.lock().await;
    let s = setup(&bin, 10).await;
    s.mock.push(MockReply::ToolCalls(vec![
        ("approve_me".into(), "{}".into()),
        ("approve_me".into(), "{\"again\":true}".into()),
    ]));
    s.mock.push(MockReply::Text("both ran".into()));
    let ingress = s.restate.ingress_url();
    let http = s.restate.http.clone();
    let run = tokio::spawn(async move {
        let r = http
            .post(format!("{ingress}/ModuSession/frank/run"))
            .json(&json!({"message": "please"}));
        r.send().await.unwrap().json::<serde_json::Value>().await.unwrap()
    });
    let mut pending = wait_for_approvals(&s.restate, "frank").await;
    let started = Instant::now();
    while pending.as_array().map_or(0, Vec::len) < 2 {
        assert!(started.elapsed() < Duration::from_secs(30), "{pending}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        pending = s.restate.call("frank", "approvals", json!(null)).await;
    }
    for request in pending.as_array().unwrap().iter().rev() {
        let call_id = request["request"]["call_id"].as_str().unwrap();
        let decided = s
            .restate
            .call("frank", "decide", json!({"call_id": call_id, "decision": "approved"}))
            .await;
        assert_eq!(decided, json!(true));
    }
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .unwrap_or_else(|_| panic!("the run did not end; ledger {:?}", ledger(&s.ledger)))
        .unwrap();
    assert_eq!(out["output"], "both ran", "{out}");
    assert_eq!(ledger(&s.ledger).len(), 2, "each approved call ran once");
}

/// Starts a run whose model asks for two calls of `approve_me` (then answers `answer`), and
/// waits until both are listed: the run's handle and the two call ids, in the listed order.
async fn run_with_two_approvals(
    s: &Setup,
    session: &str,
    answer: &str,
) -> (tokio::task::JoinHandle<serde_json::Value>, String, String) {
    s.mock.push(MockReply::ToolCalls(vec![
        ("approve_me".into(), "{}".into()),
        ("approve_me".into(), "{\"again\":true}".into()),
    ]));
    s.mock.push(MockReply::Text(answer.into()));
    let url = format!("{}/ModuSession/{session}/run", s.restate.ingress_url());
    let http = s.restate.http.clone();
    let run = tokio::spawn(async move {
        let r = http.post(url).json(&json!({"message": "please"}));
        r.send().await.unwrap().json::<serde_json::Value>().await.unwrap()
    });
    let started = Instant::now();
    let mut pending = wait_for_approvals(&s.restate, session).await;
    while pending.as_array().map_or(0, Vec::len) < 2 {
        assert!(started.elapsed() < Duration::from_secs(30), "{pending}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        pending = s.restate.call(session, "approvals", json!(null)).await;
    }
    let id = |i: usize| pending[i]["request"]["call_id"].as_str().unwrap().to_owned();
    (run, id(0), id(1))
}

/// A decision binds its call: a second, opposite decision is answered `false` (not applied)
/// and the call runs as first decided; the same decision again is `true`. Of two opposite
/// decisions sent at once, exactly one is applied, and the call does what that one said.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_opposite_decision_is_not_applied_and_the_first_one_holds() {
    let Some(bin) = server_bin() else { return };
    let _serial = SERIAL.lock().await;
    let s = setup(&bin, 10).await;
    let (run, first, second) = run_with_two_approvals(&s, "hana", "decided").await;
    let decide = |call: String, decision: serde_json::Value| {
        let restate = &s.restate;
        async move {
            let mut body = decision;
            body["call_id"] = json!(call);
            restate.call("hana", "decide", body).await
        }
    };
    let approve = json!({"decision": "approved"});
    let reject = json!({"decision": "rejected", "message": "REJECTED-TOO-LATE"});
    assert_eq!(decide(first.clone(), approve.clone()).await, json!(true));
    assert_eq!(
        decide(first.clone(), reject.clone()).await,
        json!(false),
        "a reject after an approval was reported as recorded"
    );
    assert_eq!(
        decide(first.clone(), approve.clone()).await,
        json!(true),
        "the same decision again"
    );

    // Two opposite decisions at once: one wins, the other is told it did not.
    let (a, r) = tokio::join!(
        decide(second.clone(), approve.clone()),
        decide(second.clone(), reject.clone())
    );
    assert_eq!(
        [a.clone(), r.clone()].iter().filter(|v| **v == json!(true)).count(),
        1,
        "approve: {a}, reject: {r}"
    );
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the run did not end")
        .unwrap();
    assert_eq!(out["output"], "decided", "{out}");
    let lines = ledger(&s.ledger);
    let ran = |call: &str| {
        lines
            .iter()
            .any(|l| l.1 == call && l.2 == "approve_me" && l.3 == "done")
    };
    assert!(ran(&first), "the approved call ran: {lines:?}");
    assert_eq!(
        ran(&second),
        a == json!(true),
        "the second call did what the applied decision said: {lines:?}"
    );
    let sent = serde_json::to_string(&s.mock.requests()[1]["messages"]).unwrap();
    assert_eq!(
        sent.matches("REJECTED-TOO-LATE").count(),
        usize::from(r == json!(true)),
        "only an applied rejection reaches the model: {sent}"
    );
    // The run is over: no call waits, nothing is applied.
    assert_eq!(decide(first, reject).await, json!(false));
    assert_eq!(s.restate.call("hana", "approvals", json!(null)).await, json!([]));
}

/// A call the run has received a decision for leaves the `approvals` list while the run waits
/// for the others (decided out of the listed order here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decided_call_leaves_the_approvals_list() {
    let Some(bin) = server_bin() else { return };
    let _serial = SERIAL.lock().await;
    let s = setup(&bin, 10).await;
    let (run, first, second) = run_with_two_approvals(&s, "ivan", "listed").await;
    let decided = s
        .restate
        .call("ivan", "decide", json!({"call_id": second, "decision": "approved"}))
        .await;
    assert_eq!(decided, json!(true));
    let started = Instant::now();
    let listed = loop {
        let pending = s.restate.call("ivan", "approvals", json!(null)).await;
        let ids: Vec<String> = pending
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["request"]["call_id"].as_str().unwrap().to_owned())
            .collect();
        if ids.len() < 2 || started.elapsed() > Duration::from_secs(10) {
            break ids;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        listed,
        vec![first.clone()],
        "the decided call is still listed as waiting"
    );
    // The other call, decided through the awakeable endpoint, leaves it too, and the run ends.
    let pending = s.restate.call("ivan", "approvals", json!(null)).await;
    let id = pending[0]["awakeable_id"].as_str().unwrap();
    let r = s
        .restate
        .http
        .post(format!("{}/restate/awakeables/{id}/resolve", s.restate.ingress_url()))
        .json(&json!({"decision": "approved"}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the run did not end")
        .unwrap();
    assert_eq!(out["output"], "listed", "{out}");
    assert_eq!(ledger(&s.ledger).len(), 2, "both calls ran");
    assert_eq!(s.restate.call("ivan", "approvals", json!(null)).await, json!([]));
}

/// A worker killed while its run waits for approvals, one decided already: the new worker
/// replays the decisions taken (in the order they came) and the run goes on with the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_between_two_decisions_is_replaced_and_both_calls_run_once() {
    let Some(bin) = server_bin() else { return };
    let _serial = SERIAL.lock().await;
    let mut s = setup(&bin, 10).await;
    let (run, first, second) = run_with_two_approvals(&s, "olga", "after the kill").await;
    let decide = |call: &str| json!({"call_id": call, "decision": "approved"});
    assert_eq!(s.restate.call("olga", "decide", decide(&second)).await, json!(true));
    let started = Instant::now();
    while s
        .restate
        .call("olga", "approvals", json!(null))
        .await
        .as_array()
        .map_or(0, Vec::len)
        > 1
    {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the decision was not received"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s.worker.kill();
    let port = s.worker.port;
    s.worker = Worker::start(port, &s.mock.base_url(), &s.ledger, 10, &s.worker_log).await;
    assert_eq!(
        s.restate.call("olga", "decide", decide(&second)).await,
        json!(true),
        "the same again"
    );
    assert_eq!(s.restate.call("olga", "decide", decide(&first)).await, json!(true));
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the run did not end")
        .unwrap();
    assert_eq!(out["output"], "after the kill", "{out}");
    let lines = ledger(&s.ledger);
    assert_eq!(lines.len(), 2, "each approved call ran once: {lines:?}");
    assert_eq!(calls(&s.mock), 2, "no model call was repeated");
}
