// A tool typed for the context `Ctx` on a builder whose context is `()`.
use modu_agent::Agent;
use modu_core::FunctionTool;
use modu_testing::ScriptedModel;

struct Ctx;

fn main() {
    let tool = FunctionTool::<Ctx>::typed("t", "T", |_ctx, v: serde_json::Value| async move { Ok(v) });
    let _ = Agent::builder(ScriptedModel::new()).tool(tool);
}
