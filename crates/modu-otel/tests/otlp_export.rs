//! The OTLP/HTTP exporter is wired: a receiver on 127.0.0.1 inside the test decodes the
//! protobuf bodies the pipeline posts after a real agent run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::post;
use modu_agent::Agent;
use modu_core::{FunctionTool, ToolSpec};
use modu_otel::OtlpPipeline;
use modu_testing::ScriptedModel;
use opentelemetry_proto::tonic::collector::metrics::v1::{ExportMetricsServiceRequest, ExportMetricsServiceResponse};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;
use serde_json::json;

#[derive(Clone, Default)]
struct Received {
    traces: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
    metrics: Arc<Mutex<Vec<ExportMetricsServiceRequest>>>,
    headers: Arc<Mutex<Vec<HeaderMap>>>,
}

async fn traces(State(r): State<Received>, headers: HeaderMap, body: Bytes) -> (StatusCode, HeaderMap, Vec<u8>) {
    let req = ExportTraceServiceRequest::decode(body).expect("a protobuf ExportTraceServiceRequest");
    r.traces.lock().unwrap().push(req);
    r.headers.lock().unwrap().push(headers);
    let mut h = HeaderMap::new();
    h.insert(header::CONTENT_TYPE, "application/x-protobuf".parse().unwrap());
    (StatusCode::OK, h, ExportTraceServiceResponse::default().encode_to_vec())
}

async fn metrics(State(r): State<Received>, body: Bytes) -> (StatusCode, HeaderMap, Vec<u8>) {
    let req = ExportMetricsServiceRequest::decode(body).expect("a protobuf ExportMetricsServiceRequest");
    r.metrics.lock().unwrap().push(req);
    let mut h = HeaderMap::new();
    h.insert(header::CONTENT_TYPE, "application/x-protobuf".parse().unwrap());
    (
        StatusCode::OK,
        h,
        ExportMetricsServiceResponse::default().encode_to_vec(),
    )
}

fn str_attr(attrs: &[opentelemetry_proto::tonic::common::v1::KeyValue], key: &str) -> Option<String> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
            AnyValue::StringValue(s) => Some(s.clone()),
            _ => None,
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_and_metrics_reach_an_otlp_http_receiver() {
    let received = Received::default();
    let app = Router::new()
        .route("/v1/traces", post(traces))
        .route("/v1/metrics", post(metrics))
        .with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let otlp = OtlpPipeline::builder(format!("http://{addr}"))
        .service_name("otlp-test-agent")
        .header("x-tenant", "t-1")
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let sink = Arc::new(otlp.event_sink().build());
    let echo = FunctionTool::<()>::new(
        ToolSpec::new("echo", "e", json!({"type": "object"})),
        |_c, a| async move { Ok(a) },
    );
    let model = ScriptedModel::new().tool_call("echo", json!({"x": 1})).text("ok");
    let agent = Agent::builder(model)
        .name("exported")
        .tool(echo)
        .event_sink(sink)
        .build()
        .unwrap();
    assert!(agent.run("go").await.is_completed());

    let pipeline = otlp.clone();
    tokio::task::spawn_blocking(move || pipeline.force_flush())
        .await
        .unwrap()
        .unwrap();

    let reqs = received.traces.lock().unwrap().clone();
    assert!(!reqs.is_empty(), "no trace export arrived");
    let mut names = Vec::new();
    let mut service = None;
    for req in &reqs {
        for rs in &req.resource_spans {
            if let Some(res) = &rs.resource {
                service = service.or(str_attr(&res.attributes, "service.name"));
            }
            for ss in &rs.scope_spans {
                assert_eq!(ss.scope.as_ref().unwrap().name, "modu-otel");
                for span in &ss.spans {
                    names.push(span.name.clone());
                    if span.name == "execute_tool echo" {
                        assert_eq!(str_attr(&span.attributes, "gen_ai.tool.name").as_deref(), Some("echo"));
                        assert!(!span.parent_span_id.is_empty());
                    }
                    if span.name == "invoke_agent exported" {
                        assert_eq!(
                            str_attr(&span.attributes, "gen_ai.agent.name").as_deref(),
                            Some("exported")
                        );
                        assert!(span.parent_span_id.is_empty());
                    }
                }
            }
        }
    }
    names.sort();
    assert_eq!(
        names,
        [
            "chat scripted",
            "chat scripted",
            "execute_tool echo",
            "invoke_agent exported"
        ]
    );
    assert_eq!(service.as_deref(), Some("otlp-test-agent"));
    let headers = received.headers.lock().unwrap().clone();
    assert_eq!(headers[0].get("x-tenant").unwrap(), "t-1");
    assert_eq!(headers[0].get(header::CONTENT_TYPE).unwrap(), "application/x-protobuf");

    let metric_names: Vec<String> = received
        .metrics
        .lock()
        .unwrap()
        .iter()
        .flat_map(|r| r.resource_metrics.iter())
        .flat_map(|rm| rm.scope_metrics.iter())
        .flat_map(|sm| sm.metrics.iter())
        .map(|m| m.name.clone())
        .collect();
    assert!(
        metric_names.iter().any(|n| n == "gen_ai.client.token.usage"),
        "{metric_names:?}"
    );
    assert!(
        metric_names.iter().any(|n| n == "gen_ai.client.operation.duration"),
        "{metric_names:?}"
    );

    tokio::task::spawn_blocking(move || otlp.shutdown())
        .await
        .unwrap()
        .unwrap();
    server.abort();
}
