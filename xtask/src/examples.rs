//! The `examples` step: every offline example run, its stdout checked against [`EXAMPLES`].

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::{Result, cargo, root};

/// An example CI runs, and the lines its stdout must hold.
struct Example {
    /// The step's name.
    name: &'static str,
    /// `cargo run -q --locked` and these.
    args: &'static [&'static str],
    /// Written to its stdin (then closed); `None`: no stdin.
    stdin: Option<&'static str>,
    /// Each must occur in its stdout.
    expect: &'static [&'static str],
}

/// Every offline example, with its answer. quickstart and plan_execute talk to the bundled
/// mock server (the OPENAI_* variables are removed).
const EXAMPLES: &[Example] = &[
    Example {
        name: "custom provider on modu-core alone",
        args: &["-p", "modu-example-custom-provider"],
        stdin: None,
        expect: &["Your text has 5 words.\n"],
    },
    Example {
        name: "quickstart (mock server)",
        args: &["-p", "modu-examples", "--example", "quickstart"],
        stdin: None,
        expect: &[
            "model: the bundled mock server at http://127.0.0.1:",
            "tool call: add({\"a\":20,\"b\":22})\n",
            "answer: Answer { result: 42, ",
        ],
    },
    Example {
        name: "plan_execute (mock server)",
        args: &["-p", "modu-examples", "--example", "plan_execute"],
        stdin: None,
        expect: &[
            "  tool: add({\"a\":12,\"b\":30})\n",
            "  tool: multiply({\"a\":42,\"b\":2})\n",
            "  tool: subtract({\"a\":84,\"b\":4})\n",
            "verified 3 steps\n",
            "answer: (12 + 30) * 2 - 4 = 80.\n",
        ],
    },
    Example {
        name: "approvals, approved on stdin",
        args: &["-p", "modu-examples", "--example", "approvals"],
        stdin: Some("y\n"),
        expect: &[
            "The agent wants to call delete_file({\"path\":\"build/cache.bin\"}). Approve? [y/n] ",
            "answer: The cache file is gone.\n",
        ],
    },
    Example {
        name: "approvals, rejected on stdin",
        args: &["-p", "modu-examples", "--example", "approvals"],
        stdin: Some("n\n"),
        expect: &["rejected\n", "answer: Understood, I left the file alone.\n"],
    },
    Example {
        name: "handoff",
        args: &["-p", "modu-examples", "--example", "handoff"],
        stdin: None,
        expect: &[
            "handoff to billing requested: refund request\n",
            "billing answered: Billing here: your refund of 30 EUR is approved.\n",
        ],
    },
    Example {
        name: "invoice_review (modu-skills)",
        args: &["-p", "modu-skills", "--example", "invoice_review"],
        stdin: None,
        expect: &[
            "loaded invoice-review 1.0.0 sha256:",
            "[\"lookup_invoice\", \"lookup_vendor\", \"modu_skill_read\", \"modu_skill_search\"]\n",
            "assistant calls [\"modu_skill_read\"]\n",
            "output: INV-42 from ACME (active) totals 1,450 EUR: above 1,000 EUR, so it needs a second approval.\n",
        ],
    },
    Example {
        name: "span_tree (modu-otel)",
        args: &["-p", "modu-otel", "--example", "span_tree"],
        stdin: None,
        expect: &[
            "output: Some(\"Sunny; stocks unavailable.\")\n",
            "  invoke_agent assistant [",
            "    execute_tool stocks [",
            "ERROR(execution: upstream_down)\n",
            "  invoke_agent orchestrator [",
            "      invoke_agent researcher [",
            "metric gen_ai.client.token.usage ({token})\n",
        ],
    },
];

/// The expected pieces missing from an example's output.
fn missing_output<'a>(stdout: &str, expect: &[&'a str]) -> Vec<&'a str> {
    expect.iter().copied().filter(|e| !stdout.contains(e)).collect()
}

/// Runs every example in [`EXAMPLES`] and checks its output.
pub(crate) fn examples() -> Result<()> {
    for example in EXAMPLES {
        let step = format!("example: {}", example.name);
        let mut cmd = Command::new(cargo());
        cmd.args(["run", "-q", "--locked"])
            .args(example.args)
            .env_remove("OPENAI_BASE_URL")
            .env_remove("OPENAI_MODEL")
            .env_remove("OPENAI_API_KEY");
        let stdout = run_captured(&step, &mut cmd, example.stdin)?;
        let missing = missing_output(&stdout, example.expect);
        if !missing.is_empty() {
            return Err(format!("{step}: the output lacks {missing:?}"));
        }
        println!("    output checked ({} expected pieces)", example.expect.len());
    }
    Ok(())
}

/// Like [`run`](crate::run), but feeds `stdin` and returns stdout (also echoed); stderr passes through.
fn run_captured(step: &str, cmd: &mut Command, stdin: Option<&str>) -> Result<String> {
    println!("\n==> {step}\n    {cmd:?}");
    let started = Instant::now();
    let mut child = cmd
        .current_dir(root())
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("{step}: cannot start: {e}"))?;
    if let Some(input) = stdin
        && let Some(mut pipe) = child.stdin.take()
    {
        pipe.write_all(input.as_bytes())
            .map_err(|e| format!("{step}: cannot write its stdin: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("{step}: cannot wait for it: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    for line in stdout.lines() {
        println!("    | {line}");
    }
    println!("    ({step}: {:.1}s)", started.elapsed().as_secs_f64());
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(format!("{step} failed ({})", out.status))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn missing_example_output_is_named() {
        let out = "answer: 42\nusage: 3 requests\n";
        assert!(missing_output(out, &["answer: 42\n", "usage: "]).is_empty());
        assert_eq!(missing_output(out, &["answer: 41", "usage: "]), ["answer: 41"]);
        // Every example expects something: a check that cannot fail is no check.
        for e in EXAMPLES {
            assert!(!e.expect.is_empty(), "{}", e.name);
            assert!(e.expect.iter().all(|x| !x.trim().is_empty()), "{}", e.name);
        }
    }

    #[test]
    fn every_offline_example_is_run_by_ci() {
        let run: Vec<String> = EXAMPLES.iter().map(|e| e.args.join(" ")).collect();
        let covered = |args: &str| run.iter().any(|r| r == args);
        let dir = root().join("examples/examples");
        let entries = std::fs::read_dir(&dir).expect("examples/examples");
        for e in entries.flatten() {
            let name = e.path().file_stem().unwrap_or_default().to_string_lossy().into_owned();
            assert!(
                covered(&format!("-p modu-examples --example {name}")),
                "example {name} is not run (and checked) by `cargo xtask ci`"
            );
        }
        for args in [
            "-p modu-example-custom-provider",
            "-p modu-skills --example invoice_review",
            "-p modu-otel --example span_tree",
        ] {
            assert!(covered(args), "{args}");
        }
        // approvals runs twice: approved and rejected on stdin.
        let approvals: Vec<_> = EXAMPLES.iter().filter(|e| e.args.contains(&"approvals")).collect();
        assert_eq!(approvals.len(), 2);
        assert!(approvals.iter().all(|e| e.stdin.is_some()));
    }

    #[test]
    fn every_example_file_is_registered() {
        // Tidy check: each examples/examples/*.rs has an [[example]] entry.
        let dir = root().join("examples/examples");
        let Ok(entries) = std::fs::read_dir(&dir) else { return };
        let manifest = std::fs::read_to_string(root().join("examples/Cargo.toml")).unwrap_or_default();
        for e in entries.flatten() {
            let name = e
                .path()
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            assert!(
                manifest.contains(&format!("name = \"{name}\"")),
                "example {name} is not registered in examples/Cargo.toml"
            );
        }
    }
}
