//! End-to-end tests of `modu skills` running the built binary on temporary folders.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

fn modu(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_modu"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run modu")
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exit code")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn init_validate_inspect_lock_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let o = modu(cwd, &["skills", "init", "invoice-review", "--path", "skills"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(cwd.join("skills/invoice-review/SKILL.md").is_file());
    assert!(stdout(&o).contains("modu skills validate"), "tells what to do next");

    let o = modu(cwd, &["skills", "validate", "skills"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("ok: 1 skill valid"), "{}", stdout(&o));

    // A single skill folder works too.
    let o = modu(cwd, &["skills", "validate", "skills/invoice-review"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));

    let o = modu(cwd, &["skills", "inspect", "skills", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let skill = &v["skills"][0];
    assert_eq!(skill["name"], "invoice-review");
    assert_eq!(skill["version"], "0.1.0");
    assert!(skill["digest"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(v["errors"], serde_json::json!([]));

    let o = modu(cwd, &["skills", "inspect", "skills"]);
    assert_eq!(code(&o), 0);
    assert!(stdout(&o).contains("invoice-review 0.1.0") && stdout(&o).contains("references/README.md"));

    let o = modu(cwd, &["skills", "lock", "skills"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let lock: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(cwd.join("skills/skills.lock.json")).unwrap()).unwrap();
    assert_eq!(lock["skills"][0]["name"], "invoice-review");
    assert_eq!(lock["skills"][0]["catalog"], "skills");
    assert_eq!(lock["skills"][0]["digest"], skill["digest"]);

    let o = modu(cwd, &["skills", "validate", "skills"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("matches"), "{}", stdout(&o));

    // A script changed after locking: validation fails and names the file.
    std::fs::create_dir_all(cwd.join("skills/invoice-review/scripts")).unwrap();
    std::fs::write(cwd.join("skills/invoice-review/scripts/run.sh"), "echo hi\n").unwrap();
    let o = modu(cwd, &["skills", "validate", "skills"]);
    assert_eq!(code(&o), 1);
    assert!(
        stderr(&o).contains("invoice-review: file scripts/run.sh was added"),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("modu skills lock"),
        "tells how to fix it: {}",
        stderr(&o)
    );
}

#[test]
fn validation_errors_name_file_line_and_rule_and_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let skill = dir.path().join("skills/bad");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: bad\ndescription: A bad one.\napplies-to:\n  - act\n  - review\n---\nBody\n",
    )
    .unwrap();
    let o = modu(dir.path(), &["skills", "validate", "skills"]);
    assert_eq!(code(&o), 1);
    let err = stderr(&o);
    assert!(err.contains("skills/bad/SKILL.md:6: unknown_stage:"), "{err}");
    assert!(err.contains("1 problem"), "{err}");
    // inspect reports the problem too, and exits 1.
    let o = modu(dir.path(), &["skills", "inspect", "skills", "--json"]);
    assert_eq!(code(&o), 1);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["skills"], serde_json::json!([]));
    assert!(v["errors"][0].as_str().unwrap().contains("unknown_stage"));
    // lock refuses to write.
    let o = modu(dir.path(), &["skills", "lock", "skills"]);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("not written"));
    assert!(!dir.path().join("skills/skills.lock.json").exists());
}

#[cfg(unix)]
#[test]
fn symlinks_in_a_skill_fail_validation() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    assert_eq!(code(&modu(cwd, &["skills", "init", "linked", "--path", "skills"])), 0);
    std::os::unix::fs::symlink("/etc/passwd", cwd.join("skills/linked/references/passwd.md")).unwrap();
    let o = modu(cwd, &["skills", "validate", "skills"]);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("not_regular_file"), "{}", stderr(&o));
}

#[test]
fn usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path();
    let o = modu(cwd, &["skills", "init", "Bad_Name"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("name_characters"), "{}", stderr(&o));
    let o = modu(cwd, &["skills", "validate", "missing"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("missing does not exist"));
    let o = modu(cwd, &["skills", "frobnicate"]);
    assert_eq!(code(&o), 2);
    let o = modu(cwd, &["skills"]);
    assert_eq!(code(&o), 2);
    // Locking a skill folder instead of its catalog is a usage error.
    assert_eq!(code(&modu(cwd, &["skills", "init", "one", "--path", "cat"])), 0);
    let o = modu(cwd, &["skills", "lock", "cat/one"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("catalog folder"));
    // init refuses to overwrite (exit 1: the command ran, the folder exists).
    let o = modu(cwd, &["skills", "init", "one", "--path", "cat"]);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("already exists"));
    // An empty catalog has nothing to validate.
    std::fs::create_dir(cwd.join("empty")).unwrap();
    let o = modu(cwd, &["skills", "validate", "empty"]);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("no skills found"));
    // --help succeeds.
    assert_eq!(code(&modu(cwd, &["skills", "--help"])), 0);
}
