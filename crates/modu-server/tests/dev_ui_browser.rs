//! The dev UI in a real browser: Debian's `chromium`, headless, driven over WebDriver
//! (`chromedriver`). The test types a message, sees the streamed answer's tool call wait for
//! approval, approves it, sees the tool's result and the answer, then finds the thread in the
//! session list, reads the runs' AG-UI events, and reopens the session from its history.
//! Screenshots are saved under `$CARGO_TARGET_TMPDIR/modu-server-dev-ui/` (the path is
//! printed).
//!
//! - `MODU_TEST_CHROMIUM`: the chromium binary (`which chromium`).
//! - `MODU_TEST_CHROMEDRIVER`: the chromedriver binary (`which chromedriver`).
//!
//! The test skips when either is unset, and fails under `CI=true`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{serve, weather_model, weather_tool};
use fantoccini::{Client, ClientBuilder, Locator};
use modu_agent::Agent;
use modu_core::{InMemoryCheckpointStore, InMemoryConversationStore};
use modu_server::{BearerTokens, ModuServer, Principal};
use serde_json::{Value, json};

const TOKEN: &str = "browser-token";

/// chromedriver on a free loopback port, killed when dropped.
struct Driver {
    _child: tokio::process::Child,
    url: String,
}

async fn chromedriver(path: &str) -> Driver {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = tokio::process::Command::new(path)
        .arg(format!("--port={port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("cannot start chromedriver");
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(r) = reqwest::get(format!("{url}/status")).await
            && r.status().is_success()
        {
            break;
        }
        assert!(Instant::now() < deadline, "chromedriver did not start on port {port}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Driver { _child: child, url }
}

async fn browser(driver: &Driver, chromium: &str) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1280,900", "--no-first-run", "--disable-extensions"],
        }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("cannot open a chromium session")
}

/// Evaluates `script` (a function body that `return`s) until it returns something truthy.
async fn until(client: &Client, what: &str, script: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let value = client.execute(script, vec![]).await.unwrap();
        let ready = match &value {
            Value::Null | Value::Bool(false) => false,
            Value::String(s) => !s.is_empty(),
            Value::Array(a) => !a.is_empty(),
            _ => true,
        };
        if ready {
            return value;
        }
        if Instant::now() > deadline {
            let page = client.execute("return document.body.innerText", vec![]).await.unwrap();
            panic!(
                "timed out waiting for {what}; the page shows:\n{}",
                page.as_str().unwrap_or("")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn screenshot(client: &Client, dir: &Path, name: &str) {
    let png = client.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a screenshot is a PNG");
    let path = dir.join(name);
    std::fs::write(&path, png).unwrap();
    println!("screenshot: {}", path.display());
}

/// Clicks the element `css` finds, finding it again while the page re-renders it (the lists
/// are rebuilt when a run ends).
async fn click(client: &Client, css: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let clicked = match client.find(Locator::Css(css)).await {
            Ok(element) => element.click().await.is_ok(),
            Err(_) => false,
        };
        if clicked {
            return;
        }
        assert!(Instant::now() < deadline, "cannot click {css}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn texts(selector: &str) -> String {
    format!("return Array.from(document.querySelectorAll({selector:?})).map((e) => e.textContent);")
}

#[tokio::test]
async fn the_dev_ui_chats_streams_approves_and_shows_sessions_and_events_in_chromium() {
    let (Some(chromium), Some(chromedriver_path)) = (
        modu_testing::service_env("MODU_TEST_CHROMIUM"),
        modu_testing::service_env("MODU_TEST_CHROMEDRIVER"),
    ) else {
        return;
    };
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = Agent::builder(weather_model())
        .name("weather")
        .tool(weather_tool(Arc::clone(&runs), true))
        .checkpoint_store(Arc::new(InMemoryCheckpointStore::new()))
        .conversation_store(Arc::new(InMemoryConversationStore::new()))
        .build()
        .unwrap();
    let tokens = BearerTokens::new().token(TOKEN, Principal::new("erin", ["weather"]));
    let base = serve(
        ModuServer::new()
            .agent("weather", agent)
            .auth(tokens)
            .dev_ui(true)
            .router(),
    )
    .await;
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("modu-server-dev-ui");
    std::fs::create_dir_all(&dir).unwrap();
    println!("screenshots go to {}", dir.display());

    let driver = chromedriver(&chromedriver_path).await;
    let client = browser(&driver, &chromium).await;
    client.goto(&format!("{base}/")).await.unwrap();

    // Without the token the agents cannot be listed; with it they can.
    until(&client, "the refusal without a token", &texts(".msg.error")).await;
    client
        .find(Locator::Css("#token"))
        .await
        .unwrap()
        .send_keys(TOKEN)
        .await
        .unwrap();
    click(&client, "#reload").await;
    let agents = until(&client, "the agent list", &texts("#agent option")).await;
    assert_eq!(agents, json!(["weather"]));

    // A message: the tool call shows as it streams, and waits for approval.
    client
        .find(Locator::Css("#text"))
        .await
        .unwrap()
        .send_keys("What is the weather in Paris?")
        .await
        .unwrap();
    click(&client, "#send").await;
    until(
        &client,
        "the approval buttons",
        "return document.querySelector('.interrupt button[data-decision=approve]') !== null",
    )
    .await;
    let tools = until(&client, "the tool call", &texts(".msg.tool")).await;
    assert_eq!(tools, json!([r#"→ get_weather({"city":"Paris"})"#]));
    assert_eq!(runs.load(Ordering::SeqCst), 0, "nothing ran before the approval");
    screenshot(&client, &dir, "1-approval.png").await;

    // Approved: the run resumes, the tool runs, its result and the answer stream in.
    click(&client, ".interrupt button[data-decision=approve]").await;
    let answer = until(
        &client,
        "the answer",
        "return Array.from(document.querySelectorAll('.msg.assistant')).map((e) => e.textContent).find((t) => t.startsWith('Forecast: ')) || ''",
    )
    .await;
    assert!(answer.as_str().unwrap().contains("sunny"), "{answer}");
    let tools = until(&client, "the tool result", &texts(".msg.tool")).await;
    let tools: Vec<&str> = tools.as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert_eq!(tools.len(), 2, "{tools:?}");
    assert!(
        tools[1].starts_with("← ") && tools[1].contains("\"sunny\""),
        "{tools:?}"
    );
    assert!(
        tools[1].contains("\"erin\""),
        "the tool ran for the token's user: {tools:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let interrupt = client
        .find(Locator::Css(".interrupt"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(interrupt.ends_with("approved"), "{interrupt}");
    screenshot(&client, &dir, "2-answer.png").await;

    // The session list shows the thread; the runs list shows both runs and their events.
    let thread = client
        .find(Locator::Css("#thread"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    until(
        &client,
        "the thread in the session list",
        &format!("return document.querySelector('#sessions button[data-session=\"{thread}\"]') !== null"),
    )
    .await;
    let listed = until(&client, "two runs", &texts("#runs button")).await;
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
    let events = client
        .find(Locator::Css("#events"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let types: Vec<&str> = events.lines().filter_map(|l| l.split(' ').next()).collect();
    assert_eq!(types.first(), Some(&"RUN_STARTED"), "{events}");
    assert_eq!(types.last(), Some(&"RUN_FINISHED"), "{events}");
    assert!(
        types.contains(&"TOOL_CALL_RESULT") && types.contains(&"TEXT_MESSAGE_CONTENT"),
        "{events}"
    );
    // The first run's events end in its interrupt.
    click(&client, "#runs li:last-child button").await;
    let first = client
        .find(Locator::Css("#events"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let last = first.lines().last().unwrap();
    assert!(
        last.starts_with("RUN_FINISHED") && last.contains("\"interrupt\""),
        "{first}"
    );
    screenshot(&client, &dir, "3-events.png").await;

    // A new thread clears the chat; choosing the session brings its history back.
    click(&client, "#new").await;
    assert_eq!(
        client
            .execute("return document.querySelectorAll('#log .msg').length", vec![])
            .await
            .unwrap(),
        json!(0)
    );
    click(&client, &format!("#sessions button[data-session=\"{thread}\"]")).await;
    let history = until(&client, "the session's history", &texts("#log .msg")).await;
    let history: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(history.first(), Some(&"What is the weather in Paris?"), "{history:?}");
    assert!(history.last().unwrap().starts_with("Forecast: "), "{history:?}");
    assert_eq!(
        client
            .find(Locator::Css("#thread"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        thread
    );
    screenshot(&client, &dir, "4-session.png").await;

    client.close().await.unwrap();
}
