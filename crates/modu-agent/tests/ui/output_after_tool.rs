// `.output::<T>()` after `.tool(..)`: the output type is already fixed.
use modu_agent::Agent;
use modu_core::FunctionTool;
use modu_testing::ScriptedModel;

#[derive(serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct Answer {
    text: String,
}

fn main() {
    let echo = FunctionTool::<()>::typed("echo", "Echo", |_ctx, v: serde_json::Value| async move { Ok(v) });
    let _ = Agent::builder(ScriptedModel::new()).tool(echo).output::<Answer>();
}
