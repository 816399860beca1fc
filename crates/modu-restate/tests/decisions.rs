//! Who may decide a call, and which decision a call gets, against a real restate-server
//! (`MODU_RESTATE_SERVER`), with worker processes (the `durable_worker` example) and the OpenAI
//! mock server as the model.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

mod common;

use std::time::{Duration, Instant};

use common::{Restate, Worker, free_port, ledger, server_bin, wait_for_approvals};
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

/// A server, the mock model and one worker (with the environment `env`), registered.
async fn setup(bin: &str, env: &[(&str, String)]) -> Setup {
    let restate = Restate::start(bin).await;
    let mock = MockOpenAiServer::start().await.unwrap();
    let ledger = restate.dir.path().join("ledger");
    let worker_log = restate.dir.path().join("worker.log");
    let worker = Worker::start_with(free_port(), &mock.base_url(), &ledger, 10, &worker_log, env).await;
    restate.register(&format!("http://127.0.0.1:{}", worker.port)).await;
    Setup {
        restate,
        mock,
        worker,
        ledger,
        worker_log,
    }
}

/// Starts a run of `session` (in the background): its handle.
fn start_run(s: &Setup, session: &str) -> tokio::task::JoinHandle<serde_json::Value> {
    let url = format!("{}/ModuSession/{session}/run", s.restate.ingress_url());
    let http = s.restate.http.clone();
    tokio::spawn(async move {
        let r = http.post(url).json(&json!({"message": "please"}));
        r.send().await.unwrap().json::<serde_json::Value>().await.unwrap()
    })
}

/// Waits for the run's answer.
async fn answer(s: &Setup, run: tokio::task::JoinHandle<serde_json::Value>) -> serde_json::Value {
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the run did not end; ledger {:?}\nworker log:\n{}",
                ledger(&s.ledger),
                std::fs::read_to_string(&s.worker_log).unwrap_or_default()
            )
        })
        .unwrap()
}

/// The calls of `approve_me` that ran (their call ids).
fn ran(s: &Setup) -> Vec<String> {
    ledger(&s.ledger)
        .into_iter()
        .filter(|l| l.2 == "approve_me" && l.3 == "done")
        .map(|l| l.1)
        .collect()
}

/// POSTs `body` to `<ingress>/ModuSession/<key>/<handler>`: its status and body.
async fn post(s: &Setup, key: &str, handler: &str, body: serde_json::Value) -> (reqwest::StatusCode, String) {
    let r = s
        .restate
        .http
        .post(format!("{}/ModuSession/{key}/{handler}", s.restate.ingress_url()))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    (status, r.text().await.unwrap_or_default())
}

/// Resolves the awakeable `id` through Restate's endpoint.
async fn resolve(s: &Setup, id: &str, decision: serde_json::Value) {
    let r = s
        .restate
        .http
        .post(format!("{}/restate/awakeables/{id}/resolve", s.restate.ingress_url()))
        .json(&decision)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "resolve {id}: {}", r.status());
}

/// The private handlers `settle` and `forget` cannot be called through the ingress, whether
/// the worker binds the session with `DurableSession::definition` or with the SDK's plain
/// `Endpoint::builder().bind(session)`: an outside `settle` approved a call nobody approved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settle_and_forget_are_not_callable_through_the_ingress_however_the_session_is_bound() {
    let Some(bin) = server_bin() else { return };
    let _serial = SERIAL.lock().await;
    let mut s = setup(&bin, &[("BIND", "plain".to_owned())]).await;
    for binding in ["plain", "definition"] {
        if binding == "definition" {
            // The same object from a worker bound with `definition`, as the latest deployment.
            let port = free_port();
            s.worker = Worker::start(port, &s.mock.base_url(), &s.ledger, 10, &s.worker_log).await;
            s.restate.register(&format!("http://127.0.0.1:{port}")).await;
        }
        let session = format!("quinn-{binding}");
        s.mock
            .push(MockReply::ToolCalls(vec![("approve_me".into(), "{}".into())]));
        s.mock.push(MockReply::Text("refused".into()));
        let run = start_run(&s, &session);
        let pending = wait_for_approvals(&s.restate, &session).await;
        let awakeable = pending[0]["awakeable_id"].as_str().unwrap();
        let call = pending[0]["request"]["call_id"].as_str().unwrap();
        let settle = json!({"session": session, "decision": {"decision": "approved"}});
        let (status, text) = post(&s, awakeable, "settle", settle).await;
        assert!(
            !status.is_success(),
            "{binding}: the ingress called settle: {status} {text}"
        );
        let (status, text) = post(&s, awakeable, "forget", json!(null)).await;
        assert!(
            !status.is_success(),
            "{binding}: the ingress called forget: {status} {text}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(ran(&s).is_empty(), "{binding}: a call nobody approved ran");
        // The call still waits for a person's decision, which holds.
        let decided = s
            .restate
            .call(
                &session,
                "decide",
                json!({"call_id": call, "decision": "rejected", "message": "no"}),
            )
            .await;
        assert_eq!(decided, json!(true), "{binding}");
        let out = answer(&s, run).await;
        assert_eq!(out["output"], "refused", "{binding}: {out}");
        assert!(ran(&s).is_empty(), "{binding}: the rejected call ran");
    }
}

/// A decision on a call of an earlier pause of a run that goes on is refused (`false`), the
/// same decision again too, as `Agent::approve` refuses a call that no longer waits: it was
/// answered `true` from the decisions the run had kept since.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_on_a_call_of_an_earlier_pause_is_refused() {
    let Some(bin) = server_bin() else { return };
    let _serial = SERIAL.lock().await;
    let s = setup(&bin, &[]).await;
    s.mock
        .push(MockReply::ToolCalls(vec![("approve_me".into(), "{}".into())]));
    s.mock.push(MockReply::ToolCalls(vec![(
        "approve_me".into(),
        "{\"again\":true}".into(),
    )]));
    s.mock.push(MockReply::Text("two pauses".into()));
    let run = start_run(&s, "pia");
    let pending = wait_for_approvals(&s.restate, "pia").await;
    let first = pending[0]["request"]["call_id"].as_str().unwrap().to_owned();
    let decide = |call: String, decision: serde_json::Value| {
        let restate = &s.restate;
        async move {
            let mut body = decision;
            body["call_id"] = json!(call);
            restate.call("pia", "decide", body).await
        }
    };
    let approve = json!({"decision": "approved"});
    let reject = json!({"decision": "rejected", "message": "too late"});
    assert_eq!(decide(first.clone(), approve.clone()).await, json!(true));

    // The second pause: another call waits.
    let started = Instant::now();
    let second = loop {
        let pending = s.restate.call("pia", "approvals", json!(null)).await;
        if let Some(id) = pending
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["request"]["call_id"].as_str())
            .find(|id| *id != first)
        {
            break id.to_owned();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no second pause: {pending}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(ran(&s), vec![first.clone()], "the first call ran");
    assert_eq!(
        decide(first.clone(), approve.clone()).await,
        json!(false),
        "a decision on a call of the earlier pause was applied"
    );
    assert_eq!(decide(first.clone(), reject.clone()).await, json!(false));
    assert_eq!(decide(second.clone(), approve.clone()).await, json!(true));
    let out = answer(&s, run).await;
    assert_eq!(out["output"], "two pauses", "{out}");
    assert_eq!(ran(&s), vec![first, second], "each approved call ran once");
}

/// A call decided both through its awakeable and through `decide` gets the decision that
/// resolved its awakeable first (Restate completes an awakeable once), whichever way came
/// first: a call rejected one way never runs when it is approved the other way after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_decided_both_ways_gets_the_first_resolution_and_a_rejected_call_never_runs() {
    let Some(bin) = server_bin() else { return };
    let _serial = SERIAL.lock().await;
    let s = setup(&bin, &[]).await;
    s.mock.push(MockReply::ToolCalls(vec![
        ("approve_me".into(), "{}".into()),
        ("approve_me".into(), "{\"again\":true}".into()),
    ]));
    s.mock.push(MockReply::Text("mixed".into()));
    let run = start_run(&s, "rex");
    let started = Instant::now();
    let mut pending = wait_for_approvals(&s.restate, "rex").await;
    while pending.as_array().map_or(0, Vec::len) < 2 {
        assert!(started.elapsed() < Duration::from_secs(30), "{pending}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        pending = s.restate.call("rex", "approvals", json!(null)).await;
    }
    let awakeable = |i: usize| pending[i]["awakeable_id"].as_str().unwrap().to_owned();
    let call = |i: usize| pending[i]["request"]["call_id"].as_str().unwrap().to_owned();

    // Rejected through the awakeable, then at once approved through `decide`.
    resolve(
        &s,
        &awakeable(0),
        json!({"decision": "rejected", "message": "AWAKEABLE-NO"}),
    )
    .await;
    let late_approval = s
        .restate
        .call("rex", "decide", json!({"call_id": call(0), "decision": "approved"}))
        .await;
    // Rejected through `decide`, then approved through the awakeable.
    let rejected = s
        .restate
        .call(
            "rex",
            "decide",
            json!({"call_id": call(1), "decision": "rejected", "message": "DECIDE-NO"}),
        )
        .await;
    assert_eq!(rejected, json!(true));
    resolve(&s, &awakeable(1), json!({"decision": "approved"})).await;

    let out = answer(&s, run).await;
    assert_eq!(out["output"], "mixed", "{out}");
    assert!(ran(&s).is_empty(), "a rejected call ran: {:?}", ledger(&s.ledger));
    let sent = serde_json::to_string(&s.mock.requests()[1]["messages"]).unwrap();
    assert!(
        sent.contains("AWAKEABLE-NO") && sent.contains("DECIDE-NO"),
        "the model saw both rejections: {sent}"
    );
    println!("a decide after the awakeable's rejection answered {late_approval}");
}
