// `.context::<C>()` after `.agent_layer(..)`: the context type is already fixed.
use modu_agent::Agent;
use modu_testing::ScriptedModel;

struct Ctx;

fn main() {
    let _ = Agent::builder(ScriptedModel::new())
        .agent_layer(tower::layer::util::Identity::new())
        .context::<Ctx>();
}
