//! The OpenAI-compatible endpoint's request fields that shape a run (sampling, `tool_choice`,
//! `response_format`): honoured as the run's own settings or refused with 400, over real HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::{chat, post, serve};
use modu_server::ModuServer;
use serde_json::{Value, json};

/// The weather agent, with its own temperature and stop sequence, on `model` (to read what the
/// model was asked).
fn tuned_agent(model: modu_testing::ScriptedModel) -> modu_agent::Agent {
    modu_agent::Agent::builder(model)
        .tool(common::weather_tool(Arc::default(), false))
        .model_settings(modu_agent::ModelSettings::new().temperature(0.9).stop(["AGENT"]))
        .build()
        .unwrap()
}

/// The sampling fields a request sets are its run's settings, over the agent's, for every
/// model call of the run; a field it does not set (or one the server does not read,
/// `logit_bias`) leaves the agent's.
#[tokio::test]
async fn sampling_fields_are_the_runs_own_settings_over_the_agents() {
    use modu_core::{ReasoningEffort, ToolChoice};
    let model = common::weather_model();
    let base = serve(ModuServer::new().agent("weather", tuned_agent(model.clone())).router()).await;
    let url = format!("{base}/v1/chat/completions");
    let mut body = chat("weather", false);
    for (field, value) in [
        ("temperature", json!(0.25)),
        ("max_completion_tokens", json!(64)),
        ("max_tokens", json!(999)),
        ("seed", json!(7)),
        ("stop", json!("END")),
        ("parallel_tool_calls", json!(false)),
        ("reasoning_effort", json!("low")),
        ("tool_choice", json!("none")),
        ("top_p", json!(0.5)),
        ("frequency_penalty", json!(0.5)),
        ("presence_penalty", json!(-1.0)),
        ("logit_bias", json!({"50256": -100})),
        ("response_format", json!({"type": "text"})),
    ] {
        body[field] = value;
    }
    let (status, text, _) = post(&url, None, &body).await;
    assert_eq!(status, 200, "{text}");
    let requests = model.requests();
    assert_eq!(requests.len(), 2, "a tool round, then the answer");
    for request in &requests {
        assert_eq!(request.temperature, Some(0.25));
        assert_eq!(
            request.max_tokens,
            Some(64),
            "max_completion_tokens wins over max_tokens"
        );
        assert_eq!(request.seed, Some(7));
        assert_eq!(request.top_p, Some(0.5));
        assert_eq!(request.frequency_penalty, Some(0.5));
        assert_eq!(request.presence_penalty, Some(-1.0));
        assert_eq!(request.stop, ["END"]);
        assert_eq!(request.reasoning_effort, Some(ReasoningEffort::Low));
    }
    assert_eq!(requests[0].parallel_tool_calls, Some(false));
    assert_eq!(requests[0].tool_choice, Some(ToolChoice::None));

    // Without the fields (`tool_choice: "auto"` asks for nothing), the agent's own settings.
    let mut plain = chat("weather", true);
    plain["tool_choice"] = json!("auto");
    let (status, text, _) = post(&url, None, &plain).await;
    assert_eq!(status, 200, "{text}");
    let requests = model.requests();
    let last = requests.last().unwrap();
    assert_eq!(last.temperature, Some(0.9));
    assert_eq!(last.stop, ["AGENT"]);
    assert_eq!(last.max_tokens, None);
    assert_eq!(requests[requests.len() - 2].tool_choice, None);

    // An agent with its own output limit: a request may lower it, never raise it.
    let model = common::weather_model();
    let capped = modu_agent::Agent::builder(model.clone())
        .tool(common::weather_tool(Arc::default(), false))
        .model_settings(modu_agent::ModelSettings::new().max_tokens(100))
        .build()
        .unwrap();
    let base = serve(ModuServer::new().agent("weather", capped).router()).await;
    let url = format!("{base}/v1/chat/completions");
    for (asked, sent) in [(5_000, 100), (40, 40)] {
        let mut body = chat("weather", false);
        body["max_completion_tokens"] = json!(asked);
        let (status, text, _) = post(&url, None, &body).await;
        assert_eq!(status, 200, "{text}");
        let requests = model.requests();
        assert_eq!(requests.last().unwrap().max_tokens, Some(sent), "asked for {asked}");
    }
}

/// A field the server cannot honour is refused before anything runs, with 400 in OpenAI's
/// error shape, `param` naming the field.
#[tokio::test]
async fn fields_the_agent_cannot_honour_are_refused_naming_the_param() {
    let model = common::weather_model();
    let base = serve(ModuServer::new().agent("weather", tuned_agent(model.clone())).router()).await;
    let url = format!("{base}/v1/chat/completions");
    for (field, value, code) in [
        ("tool_choice", json!("required"), "unsupported_value"),
        (
            "tool_choice",
            json!({"type": "function", "function": {"name": "get_weather"}}),
            "unsupported_value",
        ),
        ("function_call", json!({"name": "get_weather"}), "unsupported_value"),
        ("response_format", json!({"type": "json_object"}), "unsupported_value"),
        (
            "response_format",
            json!({"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "object"}}}),
            "unsupported_value",
        ),
        ("logprobs", json!(true), "unsupported_parameter"),
        ("top_logprobs", json!(3), "unsupported_parameter"),
        (
            "functions",
            json!([{"name": "x", "parameters": {}}]),
            "unsupported_parameter",
        ),
        ("top_p", json!(1.5), "invalid_value"),
        ("presence_penalty", json!(-3), "invalid_value"),
        ("temperature", json!(2.5), "invalid_value"),
        ("max_tokens", json!(0), "invalid_value"),
        ("reasoning_effort", json!("extreme"), "unsupported_value"),
    ] {
        for stream in [false, true] {
            let mut body = chat("weather", stream);
            body[field] = value.clone();
            let (status, text, _) = post(&url, None, &body).await;
            assert_eq!(status, 400, "{field}: {text}");
            let error = &serde_json::from_str::<Value>(&text).unwrap()["error"];
            assert_eq!(error["type"], "invalid_request_error", "{field}: {text}");
            assert_eq!(error["param"], field, "{field}: {text}");
            assert_eq!(error["code"], code, "{field}: {text}");
            assert!(error["message"].as_str().unwrap().contains(field), "{field}: {text}");
        }
    }
    assert!(model.requests().is_empty(), "nothing ran");
}

/// A field of the wrong type (a string `temperature`, a negative `max_tokens`, a message
/// without a role) is 400 `invalid_value` with `param` naming the field, as OpenAI answers
/// it, and nothing runs.
#[tokio::test]
async fn a_field_of_the_wrong_type_is_refused_naming_the_param() {
    let model = common::weather_model();
    let base = serve(ModuServer::new().agent("weather", tuned_agent(model.clone())).router()).await;
    let url = format!("{base}/v1/chat/completions");
    let mut cases: Vec<(Value, &str)> = [
        ("temperature", json!("hot")),
        ("max_tokens", json!(-5)),
        ("max_completion_tokens", json!(1.5)),
        ("seed", json!("x")),
        ("stop", json!(7)),
        ("parallel_tool_calls", json!("yes")),
        ("stream", json!("yes")),
        ("n", json!(-1)),
        ("model", json!(3)),
        ("messages", json!("hi")),
    ]
    .into_iter()
    .map(|(field, value)| {
        let mut body = chat("weather", false);
        body[field] = value;
        (body, field)
    })
    .collect();
    let mut no_role = chat("weather", false);
    no_role["messages"][1] = json!({"content": "hi"});
    cases.push((no_role, "messages[1].role"));
    let mut bad_content = chat("weather", false);
    bad_content["messages"][0]["content"] = json!(5);
    cases.push((bad_content, "messages[0].content"));
    for (body, param) in cases {
        let (status, text, _) = post(&url, None, &body).await;
        assert_eq!(status, 400, "{param}: {text}");
        let error = &serde_json::from_str::<Value>(&text).unwrap()["error"];
        assert_eq!(error["type"], "invalid_request_error", "{param}: {text}");
        assert_eq!(error["param"], param, "{param}: {text}");
        assert_eq!(error["code"], "invalid_value", "{param}: {text}");
        assert!(!text.contains("enum"), "a server type is named: {text}");
        assert!(
            !text.contains("at line"),
            "a body position instead of the field: {text}"
        );
    }
    let (status, text, _) = post(&url, None, &json!([1])).await;
    assert_eq!(status, 400, "{text}");
    assert!(
        !text.contains("ChatCompletionRequest") && !text.contains("RunOptions"),
        "{text}"
    );
    assert!(model.requests().is_empty(), "nothing ran");
}

/// A structured answer, as a client also describes it.
#[derive(serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct Forecast {
    /// The city.
    city: String,
    sky: String,
}

/// An agent with structured output takes a `response_format` that asks for what it answers
/// anyway: `json_object`, or `json_schema` with its own schema (its annotations aside, as a
/// client's generator writes them), or none; `text` or another schema is refused naming the
/// param and the agent's schema, nothing run.
#[tokio::test]
async fn a_structured_agent_takes_its_own_response_format_and_refuses_another() {
    let model = modu_testing::ScriptedModel::new()
        .text(r#"{"city":"Paris","sky":"sunny"}"#)
        .cycle();
    let agent = modu_agent::Agent::builder(model.clone())
        .output::<Forecast>()
        .build()
        .unwrap();
    let own = agent.response_format().unwrap().schema;
    let base = serve(ModuServer::new().agent("forecast", agent).router()).await;
    let url = format!("{base}/v1/chat/completions");
    // The agent's schema as a client writes it: its own title, descriptions and none of ours.
    let mut theirs = own.clone();
    theirs["title"] = json!("ForecastModel");
    theirs.as_object_mut().unwrap().remove("$schema");
    theirs["properties"]["city"]["description"] = json!("Where");
    let accepted = [
        json!(null),
        json!({"type": "json_object"}),
        json!({"type": "json_schema", "json_schema": {"name": "Forecast", "schema": own, "strict": true}}),
        json!({"type": "json_schema", "json_schema": {"name": "forecast", "schema": theirs}}),
    ];
    for format in accepted {
        for stream in [false, true] {
            let mut body = chat("forecast", stream);
            if !format.is_null() {
                body["response_format"] = format.clone();
            }
            let (status, text, _) = post(&url, None, &body).await;
            assert_eq!(status, 200, "{format}: {text}");
            assert!(text.contains(r#"\"sky\":\"sunny\""#), "{format}: {text}");
        }
    }
    let asked = model.requests().len();
    let mut other = own.clone();
    other["properties"]["sky"] = json!({"type": "integer"});
    for format in [
        // A structured agent answers JSON, never free text.
        json!({"type": "text"}),
        json!({"type": "json_schema", "json_schema": {"name": "Forecast", "schema": other}}),
        json!({"type": "json_schema", "json_schema": {"name": "Forecast"}}),
    ] {
        let mut body = chat("forecast", false);
        body["response_format"] = format.clone();
        let (status, text, _) = post(&url, None, &body).await;
        assert_eq!(status, 400, "{format}: {text}");
        let error = &serde_json::from_str::<Value>(&text).unwrap()["error"];
        assert_eq!(error["param"], "response_format", "{text}");
        assert_eq!(error["code"], "unsupported_value", "{text}");
        assert!(error["message"].as_str().unwrap().contains("Forecast"), "{text}");
    }
    assert_eq!(model.requests().len(), asked, "nothing ran");
}

/// A request cannot loosen the operator's tool policy: `tool_choice: "none"` leaves an agent
/// that must call a tool as it is, and `parallel_tool_calls: true` an agent set to one call at
/// a time; on an agent without them, the same request still tightens them.
#[tokio::test]
async fn a_request_cannot_loosen_the_agents_tool_policy() {
    use modu_core::ToolChoice;
    let strict = |model: modu_testing::ScriptedModel, settings: modu_agent::ModelSettings| {
        modu_agent::Agent::builder(model)
            .tool(common::weather_tool(Arc::default(), false))
            .model_settings(settings)
            .build()
            .unwrap()
    };
    let pinned = modu_agent::ModelSettings::new()
        .tool_choice(ToolChoice::Required)
        .parallel_tool_calls(false);
    let named = modu_agent::ModelSettings::new().tool_choice(ToolChoice::Named("get_weather".into()));
    let cases = [
        (pinned, Some(ToolChoice::Required), Some(false)),
        (named, Some(ToolChoice::Named("get_weather".into())), Some(true)),
        (modu_agent::ModelSettings::new(), Some(ToolChoice::None), Some(true)),
    ];
    for (settings, choice, parallel) in cases {
        let model = common::weather_model();
        let base = serve(
            ModuServer::new()
                .agent("weather", strict(model.clone(), settings))
                .router(),
        )
        .await;
        let mut body = chat("weather", false);
        body["tool_choice"] = json!("none");
        body["parallel_tool_calls"] = json!(true);
        let (status, text, _) = post(&format!("{base}/v1/chat/completions"), None, &body).await;
        assert_eq!(status, 200, "{text}");
        let first = &model.requests()[0];
        assert_eq!(first.tool_choice, choice, "{choice:?}");
        assert_eq!(first.parallel_tool_calls, parallel, "{choice:?}");
    }
}

/// A structured agent's output schema is published: its `/v1/models` entry carries the
/// `response_format` it answers in (sent back as it is, it is taken), and its A2A card's skill
/// answers `application/json`, the output-schema extension holding the schema. A text agent
/// publishes neither.
#[tokio::test]
async fn a_structured_agents_output_schema_is_published_for_clients() {
    let model = modu_testing::ScriptedModel::new()
        .text(r#"{"city":"Paris","sky":"sunny"}"#)
        .cycle();
    let agent = modu_agent::Agent::builder(model).output::<Forecast>().build().unwrap();
    let format = agent.response_format().unwrap();
    let own = format.schema.clone();
    // Published as OpenAI's strict mode takes it (a derived schema is not in its subset as is:
    // OpenAI would refuse it with `strict: true`).
    let (strict_form, strict) = format.wire_schema();
    let strict_form = strict_form.into_owned();
    assert!(strict);
    assert_ne!(strict_form, own);
    assert_eq!(strict_form["additionalProperties"], false);
    let server = ModuServer::new()
        .agent("forecast", agent)
        .agent("weather", tuned_agent(common::weather_model()));
    let base = serve(server.router()).await;
    let get = |path: &str| {
        let url = format!("{base}{path}");
        async move { reqwest::get(url).await.unwrap().json::<Value>().await.unwrap() }
    };
    let models = get("/v1/models").await;
    let format = &models["data"][0]["response_format"];
    assert_eq!(models["data"][0]["id"], "forecast", "{models}");
    assert_eq!(format["type"], "json_schema", "{models}");
    assert_eq!(format["json_schema"]["schema"], strict_form, "{models}");
    assert_eq!(format["json_schema"]["strict"], true, "{models}");
    assert!(models["data"][1].get("response_format").is_none(), "{models}");
    // Sent back as published, or with the agent's own schema: both are the agent's format.
    for schema in [&strict_form, &own] {
        let mut body = chat("forecast", false);
        body["response_format"] = format.clone();
        body["response_format"]["json_schema"]["schema"] = schema.clone();
        let (status, text, _) = post(&format!("{base}/v1/chat/completions"), None, &body).await;
        assert_eq!(status, 200, "{text}");
    }

    let card = get("/a2a/forecast/.well-known/agent-card.json").await;
    assert_eq!(card["skills"][0]["outputModes"], json!(["application/json"]), "{card}");
    let extension = &card["capabilities"]["extensions"][0];
    assert!(
        extension["uri"].as_str().unwrap().ends_with("/a2a/output-schema/v1"),
        "{card}"
    );
    assert_eq!(extension["required"], false, "{card}");
    assert_eq!(extension["params"]["schema"], own, "{card}");
    let text_card = get("/a2a/weather/.well-known/agent-card.json").await;
    assert!(text_card["capabilities"].get("extensions").is_none(), "{text_card}");
    assert!(text_card["skills"][0].get("outputModes").is_none(), "{text_card}");
}
