//! Token counting through vLLM's and llama.cpp's tokenizer endpoints.

use modu_core::{Message, ModelError, ToolDefinition};
use modu_openai::{OpenAiClient, TokenizeApi, VllmTokenCounter};
use serde_json::{Value, json};

/// A vLLM- or llama.cpp-shaped tokenizer server.
async fn tokenizer_server() -> (String, std::sync::Arc<std::sync::Mutex<Vec<(String, Value)>>>) {
    use axum::{Json, Router, extract::State, routing::post};
    type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, Value)>>>;
    let seen: Seen = Default::default();
    async fn tokenize(State(seen): State<Seen>, Json(body): Json<Value>) -> Json<Value> {
        seen.lock().unwrap().push(("/tokenize".into(), body.clone()));
        if let Some(messages) = body.get("messages").and_then(Value::as_array) {
            // vLLM: the chat template applied, then counted.
            let n = messages.len() as u64 * 5 + body.get("tools").map_or(0, |_| 40) + 3;
            Json(json!({"count": n, "max_model_len": 4096, "tokens": vec![1; n as usize]}))
        } else {
            let content = body["content"].as_str().unwrap_or("");
            let n = content.split_whitespace().count();
            Json(json!({"tokens": vec![1; n]}))
        }
    }
    async fn apply(State(seen): State<Seen>, Json(body): Json<Value>) -> Json<Value> {
        seen.lock().unwrap().push(("/apply-template".into(), body.clone()));
        let mut prompt = String::new();
        for m in body["messages"].as_array().unwrap() {
            prompt.push_str(&format!(
                "<|im_start|> {} {} <|im_end|> ",
                m["role"].as_str().unwrap(),
                m["content"].as_str().unwrap_or("")
            ));
        }
        Json(json!({"prompt": prompt}))
    }
    let app = Router::new()
        .route("/tokenize", post(tokenize))
        .route("/apply-template", post(apply))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/v1"), seen)
}

#[tokio::test]
async fn vllm_and_llama_cpp_tokenize_wire_shapes() {
    use modu_core::tokens::TokenCounter;
    let (url, seen) = tokenizer_server().await;
    let c = OpenAiClient::new(url, "served-name").unwrap();
    let messages = vec![Message::system("be brief"), Message::user("one two three")];
    let tools = vec![ToolDefinition::new("add", "Add", json!({"type": "object"}))];

    let vllm = VllmTokenCounter::new(&c);
    assert_eq!(vllm.api(), TokenizeApi::Vllm);
    assert_eq!(vllm.count_tokens(&messages, &[]).await.unwrap(), 13);
    let as_trait: &dyn TokenCounter = &vllm;
    assert_eq!(as_trait.count_tokens(&messages, &tools).await.unwrap(), 53);
    {
        let seen = seen.lock().unwrap();
        let (path, body) = &seen[1];
        assert_eq!(path, "/tokenize");
        assert_eq!(body["model"], "served-name");
        assert_eq!(body["add_generation_prompt"], true);
        assert_eq!(body["messages"][1], json!({"role": "user", "content": "one two three"}));
        assert_eq!(body["tools"][0]["function"]["name"], "add");
    }

    let llama = VllmTokenCounter::llama_cpp(&c);
    // "<|im_start|> system be brief <|im_end|> <|im_start|> user one two three <|im_end|>" = 11 words
    assert_eq!(llama.count_tokens(&messages, &[]).await.unwrap(), 11);
    let seen = seen.lock().unwrap();
    assert_eq!(seen[2].0, "/apply-template");
    assert_eq!(seen[3].0, "/tokenize");
    assert!(
        seen[3].1["content"]
            .as_str()
            .unwrap()
            .starts_with("<|im_start|> system")
    );
}

#[tokio::test]
async fn a_llama_cpp_server_is_not_mistaken_for_vllm() {
    // llama.cpp answers a vLLM-shaped /tokenize with an empty token list.
    use axum::{Json, Router, routing::post};
    let app = Router::new().route("/tokenize", post(|| async { Json(json!({"tokens": []})) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let c = OpenAiClient::new(format!("http://{addr}/v1"), "m").unwrap();
    let err = VllmTokenCounter::new(&c)
        .count_tokens(&[Message::user("hello")], &[])
        .await
        .unwrap_err();
    assert!(matches!(err, ModelError::InvalidResponse { .. }), "{err:?}");
}
