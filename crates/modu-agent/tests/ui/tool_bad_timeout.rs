use modu_macros::tool;

/// Too long to be a Duration: it would panic when the spec is built.
#[tool(timeout_seconds = 1e30)]
async fn forever() -> u8 {
    1
}

/// Not a finite number.
#[tool(timeout_seconds = 1e400)]
async fn infinite() -> u8 {
    1
}

/// Every call would time out at once.
#[tool(timeout_seconds = 0)]
async fn instant() -> u8 {
    1
}

/// Also zero.
#[tool(timeout_seconds = 0.0)]
async fn instant_float() -> u8 {
    1
}

fn main() {}
