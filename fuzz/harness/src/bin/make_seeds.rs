//! Writes real checkpoints (schema versions 2 and 1, standard and strict Plan-and-Execute runs;
//! paused on approvals, failed on transient errors, done) into the `checkpoint` corpus.
//!
//! `cargo run --manifest-path fuzz/Cargo.toml -p modu-fuzz-harness --bin make-seeds -- fuzz/corpus/checkpoint`

use std::path::PathBuf;
use std::sync::Arc;

use modu_agent::AgentRequest;
use modu_core::{CheckpointStore, InMemoryCheckpointStore, ModelError, UserContext};
use modu_fuzz_harness::agents::{Policy, agent, plan, step_ok};
use modu_testing::ScriptedModel;
use serde_json::{Value, json};

fn transient() -> ModelError {
    ModelError::transport("connection reset", "peer reset")
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "fuzz/corpus/checkpoint".into()),
    );
    std::fs::create_dir_all(&dir).unwrap();
    let mut seeds: Vec<(String, Value)> = Vec::new();

    // (name, policy, model, approve first call?, approve always?)
    let scenarios: Vec<(&str, Policy, ScriptedModel, u8)> = vec![
        (
            "std_paused",
            Policy::Standard,
            ScriptedModel::new().tool_call("add", json!({"a": 1, "b": 2})),
            0,
        ),
        (
            "std_paused_parallel",
            Policy::Standard,
            ScriptedModel::new().tool_calls([("add", json!({"a": 1, "b": 2})), ("search", json!({"query": "x"}))]),
            0,
        ),
        (
            "std_approved",
            Policy::Standard,
            ScriptedModel::new().tool_calls([("add", json!({"a": 1, "b": 2})), ("add", json!({"a": 3, "b": 4}))]),
            1,
        ),
        (
            "std_approved_always",
            Policy::Standard,
            ScriptedModel::new().tool_calls([("add", json!({"a": 1, "b": 2})), ("search", json!({"query": "y"}))]),
            2,
        ),
        (
            "std_rejected",
            Policy::Standard,
            ScriptedModel::new().tool_call("add", json!({"a": 5, "b": 6})),
            3,
        ),
        ("std_failed", Policy::Standard, ScriptedModel::new().error(transient), 0),
        (
            "std_failed_after_tool",
            Policy::Standard,
            ScriptedModel::new()
                .tool_call("search", json!({"query": "z", "limit": 3}))
                .error(transient),
            0,
        ),
        (
            "strict_paused",
            Policy::Strict,
            ScriptedModel::new()
                .text(plan(&[("Add", &["add"])]))
                .tool_call("add", json!({"a": 1, "b": 2})),
            0,
        ),
        (
            "strict_approved",
            Policy::Strict,
            ScriptedModel::new()
                .text(plan(&[("Add", &["add"]), ("Look", &["search"])]))
                .tool_call("add", json!({"a": 1, "b": 2})),
            1,
        ),
        (
            "strict_failed_mid_plan",
            Policy::Strict,
            ScriptedModel::new()
                .text(plan(&[("Search", &["search"]), ("Add", &["add"])]))
                .tool_call("search", json!({"query": "q"}))
                .text(step_ok("found"))
                .error(transient),
            0,
        ),
        (
            "strict_failed_planning",
            Policy::Strict,
            ScriptedModel::new().error(transient),
            0,
        ),
        (
            "strict_done",
            Policy::Strict,
            ScriptedModel::new()
                .text(plan(&[("Reply", &[])]))
                .text(step_ok("hi"))
                .text("hello there"),
            0,
        ),
    ];

    for (name, policy, model, decision) in scenarios {
        let store = Arc::new(InMemoryCheckpointStore::new());
        let agent = agent(policy, model, Arc::clone(&store));
        let request = AgentRequest::new((), "compute 1+2")
            .session(format!("session-{name}"))
            .user(UserContext::default())
            .metadata("ticket", json!({"id": 7, "tags": ["a", "b"]}));
        let result = agent.run(request).await;
        if let Some(first) = result.approvals().first() {
            match decision {
                1 => agent.approve(result.run_id(), &first.call_id).await.unwrap(),
                2 => agent.approve_always(result.run_id(), &first.call_id).await.unwrap(),
                3 => agent
                    .reject(result.run_id(), &first.call_id, Some("not now".into()))
                    .await
                    .unwrap(),
                _ => {}
            }
        }
        let state: Value = match agent.export_state(result.run_id()).await {
            Ok(v) => v,
            // A finished run's checkpoint (strict DONE) is read from the store itself.
            Err(_) => {
                let bytes = store
                    .load(result.run_id())
                    .await
                    .unwrap()
                    .unwrap_or_else(|| panic!("scenario {name} left no checkpoint: {:?}", result.error()));
                serde_json::from_slice(&bytes).unwrap()
            }
        };
        assert_eq!(state["schema_version"], modu_agent::CHECKPOINT_SCHEMA_VERSION);
        seeds.push((format!("{name}_v3"), state.clone()));
        // Version 2: the policy's state as `state.phase` and `state.strict`.
        let mut v2 = state;
        v2["schema_version"] = json!(2);
        if let Some(s) = v2["state"].as_object_mut()
            && let Some(policy) = s.remove("policy")
        {
            if policy["id"] == "plan_and_execute/1" {
                s.insert("phase".into(), json!({"phase": "act"}));
                s.insert("strict".into(), policy["state"].clone());
            } else {
                s.insert("phase".into(), policy["state"].clone());
            }
        }
        seeds.push((format!("{name}_v2"), v2.clone()));
        // Version 1: no strict state.
        let mut v1 = v2;
        v1["schema_version"] = json!(1);
        if let Some(s) = v1["state"].as_object_mut() {
            s.remove("strict");
        }
        seeds.push((format!("{name}_v1"), v1));
    }

    for (name, value) in &seeds {
        std::fs::write(
            dir.join(format!("seed_{name}.json")),
            serde_json::to_vec(value).unwrap(),
        )
        .unwrap();
    }
    println!("wrote {} checkpoints to {}", seeds.len(), dir.display());
}
