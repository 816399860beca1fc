//! The `modu` command line.
fn main() {}
