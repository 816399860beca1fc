//! The OTLP pipeline keeps its credentials: the header values (a hosted collector's API key)
//! and the endpoint's user info never show in `Debug` or in an error.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use modu_otel::OtlpPipeline;

const KEY: &str = "Sx-otlp-header-key";
const BEARER: &str = "Sx-otlp-bearer-tok";
const PASSWORD: &str = "Sx-otlp-url-pass";

fn builder(endpoint: &str) -> modu_otel::OtlpPipelineBuilder {
    OtlpPipeline::builder(endpoint)
        .header("x-api-key", KEY)
        .header("authorization", format!("Bearer {BEARER}"))
        .timeout(Duration::from_millis(500))
}

fn assert_masked(text: &str) {
    for secret in [KEY, BEARER, PASSWORD] {
        assert!(!text.contains(secret), "{secret} shows in {text}");
    }
}

#[test]
fn debug_of_the_builder_and_the_pipeline_masks_headers_and_url_user_info() {
    let b = builder(&format!("http://collector:{PASSWORD}@127.0.0.1:4318"));
    let shown = format!("{b:?}");
    assert_masked(&shown);
    // What is not secret stays readable.
    assert!(
        shown.contains("x-api-key") && shown.contains("127.0.0.1:4318"),
        "{shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_the_exporter_refuses_is_reported_without_its_credentials() {
    // A space makes the URL invalid: the exporter's error quotes it.
    let endpoint = format!("http://collector:{PASSWORD}@bad host:4318");
    let err = builder(&endpoint).build().expect_err("an invalid endpoint is refused");
    let text = format!("{err} {err:?}");
    assert_masked(&text);
}
