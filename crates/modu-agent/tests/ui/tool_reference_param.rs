use modu_macros::tool;

/// A borrowed parameter cannot be deserialised from the model's arguments.
#[tool]
async fn shout(text: &str) -> String {
    text.to_uppercase()
}

/// The run context goes first.
#[tool]
async fn late(name: String, ctx: &modu_core::RunContext<()>) -> String {
    format!("{name}{}", ctx.run_id())
}

fn main() {}
