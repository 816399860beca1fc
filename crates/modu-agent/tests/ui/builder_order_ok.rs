// The intended order: the context and output types first, then typed additions.
use modu_agent::Agent;
use modu_core::FunctionTool;
use modu_testing::ScriptedModel;

struct Ctx {
    user: String,
}

#[derive(serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
struct Answer {
    text: String,
}

fn main() {
    let whoami = FunctionTool::<Ctx>::typed("whoami", "The user", |ctx, _: serde_json::Value| async move {
        Ok(ctx.context().user.clone())
    });
    let _agent: Agent<Ctx, Answer> = Agent::builder(ScriptedModel::new())
        .name("ordered")
        .context::<Ctx>()
        .output::<Answer>()
        .instructions("Answer.")
        .tool(whoami)
        .agent_layer(tower::layer::util::Identity::new())
        .retry(modu_agent::RetryConfig::new(2))
        .build()
        .unwrap();
}
