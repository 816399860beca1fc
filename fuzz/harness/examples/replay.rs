//! Runs one target on files: `cargo run -p modu-fuzz-harness --example replay -- <target> <file>…`
//! (a finding's stack trace on stable, without libFuzzer).

fn main() {
    let mut args = std::env::args().skip(1);
    let target = args.next().expect("usage: replay <target> <file>…");
    let run = modu_fuzz_harness::TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .unwrap_or_else(|| panic!("no target named {target}"))
        .1;
    for file in args {
        let data = std::fs::read(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
        eprintln!("{target} {file}");
        run(&data);
    }
}
