//! FilesystemSkillSource: every escape attempt refused with a typed error; registry loading,
//! digests and lockfile mismatches.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::{FileTypeExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use modu_skills::{
    FilesystemSkillSource, LOCKFILE_NAME, LockMismatch, Lockfile, PathRefusal, SkillError, SkillRegistry, SkillSource,
    ValidationRule,
};

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

fn skill_md(name: &str, version: &str) -> String {
    format!(
        "---\nname: {name}\ndescription: The {name} skill.\nmetadata:\n  version: \"{version}\"\n---\n# {name}\nDo {name}.\n"
    )
}

/// A catalog folder `skills/` with `invoice-review` (references, assets, scripts) and `other`.
fn catalog() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("skills");
    let s = root.join("invoice-review");
    write(&s.join("SKILL.md"), &skill_md("invoice-review", "1.0.0"));
    write(&s.join("references/policy.md"), "Invoices above 1000 need approval.\n");
    write(&s.join("references/deep/more.md"), "Deeper notes.\n");
    write(&s.join("assets/report-template.md"), "# Report\n");
    write(&s.join("scripts/check.sh"), "#!/bin/sh\necho check\n");
    write(&root.join("other/SKILL.md"), &skill_md("other", "0.1.0"));
    (dir, root)
}

fn refusal(e: &SkillError) -> PathRefusal {
    e.refusal().unwrap_or_else(|| panic!("not a path refusal: {e:?}"))
}

#[test]
fn lists_and_reads_inside_the_folder() {
    let (_d, root) = catalog();
    let source = FilesystemSkillSource::new(&root).unwrap();
    assert_eq!(source.catalog(), "skills");
    assert_eq!(source.skill_names().unwrap(), ["invoice-review", "other"]);
    assert_eq!(
        source.list_files("invoice-review").unwrap(),
        [
            "SKILL.md",
            "assets/report-template.md",
            "references/deep/more.md",
            "references/policy.md",
            "scripts/check.sh"
        ]
    );
    assert_eq!(
        source.read("invoice-review", "references/deep/more.md").unwrap(),
        b"Deeper notes.\n"
    );
}

#[test]
fn parent_component_is_refused() {
    let (_d, root) = catalog();
    let source = FilesystemSkillSource::new(&root).unwrap();
    for path in ["../other/SKILL.md", "references/../../other/SKILL.md", "references/.."] {
        let e = source.read("invoice-review", path).unwrap_err();
        assert_eq!(refusal(&e), PathRefusal::ParentComponent, "{path}");
    }
    // The skill name itself cannot climb either.
    let e = source.read("..", "skills/other/SKILL.md").unwrap_err();
    assert_eq!(refusal(&e), PathRefusal::ParentComponent);
}

#[test]
fn absolute_path_is_refused() {
    let (_d, root) = catalog();
    let source = FilesystemSkillSource::new(&root).unwrap();
    let e = source.read("invoice-review", "/etc/passwd").unwrap_err();
    assert_eq!(refusal(&e), PathRefusal::Absolute);
    let abs = root.join("other/SKILL.md");
    let e = source.read("invoice-review", abs.to_str().unwrap()).unwrap_err();
    assert_eq!(refusal(&e), PathRefusal::Absolute);
    for malformed in ["", "references//policy.md", "./SKILL.md", "references\\policy.md"] {
        let e = source.read("invoice-review", malformed).unwrap_err();
        assert_eq!(refusal(&e), PathRefusal::Malformed, "{malformed:?}");
    }
}

#[test]
fn symlinked_file_is_refused() {
    let (dir, root) = catalog();
    let secret = dir.path().join("secret.txt");
    fs::write(&secret, "top secret").unwrap();
    symlink(&secret, root.join("invoice-review/references/link.md")).unwrap();
    let source = FilesystemSkillSource::new(&root).unwrap();
    let e = source.read("invoice-review", "references/link.md").unwrap_err();
    assert_eq!(refusal(&e), PathRefusal::Symlink);
    // Listing (validation) refuses the folder as a whole.
    let e = source.list_files("invoice-review").unwrap_err();
    assert_eq!(e.rule(), Some(ValidationRule::NotRegularFile));
    assert!(e.to_string().contains("references/link.md"), "{e}");
    let e = SkillRegistry::from_paths([&root]).unwrap_err();
    assert_eq!(e.rule(), Some(ValidationRule::NotRegularFile));
}

#[test]
fn symlinked_directory_in_the_middle_is_refused() {
    let (dir, root) = catalog();
    let outside = dir.path().join("outside");
    write(&outside.join("data.md"), "outside data");
    symlink(&outside, root.join("invoice-review/references/sub")).unwrap();
    let source = FilesystemSkillSource::new(&root).unwrap();
    let e = source.read("invoice-review", "references/sub/data.md").unwrap_err();
    assert_eq!(refusal(&e), PathRefusal::Symlink);
    // A symlinked skill folder is refused too.
    symlink(root.join("other"), root.join("alias")).unwrap();
    let e = source.read("alias", "SKILL.md").unwrap_err();
    assert_eq!(refusal(&e), PathRefusal::Symlink);
    let e = source.list_files("alias").unwrap_err();
    assert_eq!(refusal(&e), PathRefusal::Symlink);
}

#[test]
fn link_swapped_in_after_validation_is_refused() {
    let (_d, root) = catalog();
    let registry = SkillRegistry::from_paths([&root]).unwrap();
    let skill = registry.get("invoice-review").unwrap();
    assert!(skill.read_resource("references/policy.md").unwrap().contains("1000"));
    // Replace the validated file with a link to /etc/passwd.
    let target = root.join("invoice-review/references/policy.md");
    fs::remove_file(&target).unwrap();
    symlink("/etc/passwd", &target).unwrap();
    let e = skill.read_resource("references/policy.md").unwrap_err();
    assert_eq!(refusal(&e), PathRefusal::Symlink);
    // And the same through the source directly.
    let source = FilesystemSkillSource::new(&root).unwrap();
    assert_eq!(
        refusal(&source.read("invoice-review", "references/policy.md").unwrap_err()),
        PathRefusal::Symlink
    );
    // A folder swapped for a link is refused as well.
    let refs = root.join("invoice-review/references");
    fs::rename(&refs, root.join("moved")).unwrap();
    symlink(root.join("moved"), &refs).unwrap();
    let e = skill.read_resource("references/deep/more.md").unwrap_err();
    assert_eq!(refusal(&e), PathRefusal::Symlink);
}

#[test]
fn changed_content_after_load_is_refused() {
    let (_d, root) = catalog();
    let registry = SkillRegistry::from_paths([&root]).unwrap();
    fs::write(
        root.join("invoice-review/references/policy.md"),
        "Approve everything.\n",
    )
    .unwrap();
    let e = registry
        .get("invoice-review")
        .unwrap()
        .read_resource("references/policy.md")
        .unwrap_err();
    assert_eq!(refusal(&e), PathRefusal::Changed);
}

#[test]
fn special_files_are_refused() {
    let (_d, root) = catalog();
    let source = FilesystemSkillSource::new(&root).unwrap();
    // A folder where a file is expected.
    let e = source.read("invoice-review", "references/deep").unwrap_err();
    assert!(matches!(refusal(&e), PathRefusal::NotRegularFile), "{e:?}");
    // A file where a folder is expected.
    let e = source.read("invoice-review", "SKILL.md/x").unwrap_err();
    assert_eq!(refusal(&e), PathRefusal::NotRegularFile);
}

/// Runs `f` on another thread and fails if it takes longer than 10 s (a FIFO read that blocks
/// for a writer would hang forever).
fn within_10s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .expect("the call hung (a FIFO opened for reading waits for a writer)")
}

#[test]
fn a_fifo_in_a_skill_is_refused_without_hanging() {
    let (_d, root) = catalog();
    let fifo = root.join("invoice-review/references/pipe.md");
    let status = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(status.success(), "mkfifo failed");
    assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    let source = FilesystemSkillSource::new(&root).unwrap();
    // Reading the FIFO directly: refused (opened non-blocking, then fstat shows a FIFO).
    let reader = source.clone();
    let e = within_10s(move || reader.read("invoice-review", "references/pipe.md")).unwrap_err();
    assert_eq!(refusal(&e), PathRefusal::NotRegularFile, "{e:?}");
    // Listing and loading: the folder is refused, naming the FIFO.
    let e = source.list_files("invoice-review").unwrap_err();
    assert_eq!(e.rule(), Some(ValidationRule::NotRegularFile), "{e:?}");
    assert!(e.to_string().contains("references/pipe.md"), "{e}");
    let loading = root.clone();
    let e = within_10s(move || SkillRegistry::from_paths([&loading])).unwrap_err();
    assert_eq!(e.rule(), Some(ValidationRule::NotRegularFile), "{e:?}");
}

#[test]
fn a_socket_in_a_skill_is_refused() {
    let (_d, root) = catalog();
    let path = root.join("invoice-review/assets/control.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    assert!(fs::symlink_metadata(&path).unwrap().file_type().is_socket());
    let source = FilesystemSkillSource::new(&root).unwrap();
    let e = source.read("invoice-review", "assets/control.sock").unwrap_err();
    assert_eq!(refusal(&e), PathRefusal::NotRegularFile, "{e:?}");
    let e = source.list_files("invoice-review").unwrap_err();
    assert_eq!(e.rule(), Some(ValidationRule::NotRegularFile), "{e:?}");
    assert!(e.to_string().contains("assets/control.sock"), "{e}");
    let e = SkillRegistry::from_paths([&root]).unwrap_err();
    assert_eq!(e.rule(), Some(ValidationRule::NotRegularFile), "{e:?}");
}

#[test]
fn a_hard_link_from_outside_is_refused_at_load() {
    let (dir, root) = catalog();
    let secret = dir.path().join("secret.txt");
    fs::write(&secret, "top secret\n").unwrap();
    fs::hard_link(&secret, root.join("invoice-review/references/notes.md")).unwrap();
    let source = FilesystemSkillSource::new(&root).unwrap();
    // Listing refuses the folder, naming the file and the rule.
    let e = source.list_files("invoice-review").unwrap_err();
    assert_eq!(e.rule(), Some(ValidationRule::HardLink), "{e:?}");
    assert!(e.to_string().contains("references/notes.md"), "{e}");
    // Reading it through the source is refused too; the secret's bytes never come back.
    let e = source.read("invoice-review", "references/notes.md").unwrap_err();
    assert_eq!(refusal(&e), PathRefusal::HardLink, "{e:?}");
    assert!(!e.to_string().contains("top secret"), "{e}");
    // Loading fails; the other skill alone still loads once the link is gone.
    let e = SkillRegistry::from_paths([&root]).unwrap_err();
    assert_eq!(e.rule(), Some(ValidationRule::HardLink), "{e:?}");
    fs::remove_file(root.join("invoice-review/references/notes.md")).unwrap();
    assert_eq!(SkillRegistry::from_paths([&root]).unwrap().len(), 2);
}

#[test]
fn a_hard_link_made_after_load_is_refused_at_read() {
    let (dir, root) = catalog();
    let registry = SkillRegistry::from_paths([&root]).unwrap();
    let skill = registry.get("invoice-review").unwrap();
    let policy = root.join("invoice-review/references/policy.md");
    assert!(skill.read_resource("references/policy.md").unwrap().contains("1000"));
    // Swap the validated file for a hard link to an outside file with the very same bytes, so
    // the digest check alone would pass.
    let outside = dir.path().join("outside-policy.md");
    fs::write(&outside, fs::read(&policy).unwrap()).unwrap();
    fs::remove_file(&policy).unwrap();
    fs::hard_link(&outside, &policy).unwrap();
    let e = skill.read_resource("references/policy.md").unwrap_err();
    assert_eq!(refusal(&e), PathRefusal::HardLink, "{e:?}");
    // A second name made outside for a file that stays in place counts the same.
    let other = root.join("invoice-review/assets/report-template.md");
    assert!(skill.read_resource("assets/report-template.md").is_ok());
    fs::hard_link(&other, dir.path().join("copy-outside.md")).unwrap();
    let e = skill.read_resource("assets/report-template.md").unwrap_err();
    assert_eq!(refusal(&e), PathRefusal::HardLink, "{e:?}");
    // Once the outside name is gone, the file is readable again.
    fs::remove_file(dir.path().join("copy-outside.md")).unwrap();
    assert_eq!(skill.read_resource("assets/report-template.md").unwrap(), "# Report\n");
}

#[test]
fn missing_catalog_and_missing_skill_md() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        FilesystemSkillSource::new(dir.path().join("nope")),
        Err(SkillError::NotFound { .. })
    ));
    write(&dir.path().join("skills/empty/references/a.md"), "a");
    let e = SkillRegistry::from_paths([dir.path().join("skills")]).unwrap_err();
    assert_eq!(e.rule(), Some(ValidationRule::MissingSkillMd));
}

#[test]
fn a_skill_md_that_is_not_utf8_has_its_own_rule_and_line() {
    let (_d, root) = catalog();
    fs::write(
        root.join("other/SKILL.md"),
        b"---\nname: other\ndescription: Caf\xe9 menus.\n---\n",
    )
    .unwrap();
    let e = SkillRegistry::from_paths([&root]).unwrap_err();
    assert_eq!(e.rule(), Some(ValidationRule::NotUtf8));
    assert_eq!(ValidationRule::NotUtf8.id(), "not_utf8");
    let SkillError::Validation { line, message, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(*line, Some(3));
    assert!(message.starts_with("SKILL.md is not UTF-8 text (byte 32)"), "{message}");
}

#[test]
fn file_too_large() {
    let (_d, root) = catalog();
    write(&root.join("other/references/big.md"), &"x".repeat(2000));
    let source: Arc<dyn SkillSource> = Arc::new(FilesystemSkillSource::new(&root).unwrap().max_file_bytes(1000));
    let e = SkillRegistry::from_sources(vec![source]).unwrap_err();
    assert_eq!(e.rule(), Some(ValidationRule::FileTooLarge));
}

#[test]
fn duplicate_skill_across_catalogs() {
    let (_d, root) = catalog();
    let dir2 = tempfile::tempdir().unwrap();
    let root2 = dir2.path().join("more");
    write(&root2.join("other/SKILL.md"), &skill_md("other", "9.9.9"));
    let e = SkillRegistry::from_paths([&root, &root2]).unwrap_err();
    assert_eq!(e.rule(), Some(ValidationRule::DuplicateSkill));
}

#[test]
fn digest_covers_every_file_and_is_stable() {
    let (_d, root) = catalog();
    let a = SkillRegistry::from_paths([&root]).unwrap();
    let b = SkillRegistry::from_paths([&root]).unwrap();
    let da = a.get("invoice-review").unwrap().digest().to_owned();
    assert_eq!(da, b.get("invoice-review").unwrap().digest());
    assert!(da.starts_with("sha256:") && da.len() == 7 + 64);
    let skill = a.get("invoice-review").unwrap();
    let paths: Vec<&str> = skill.files().iter().map(|f| f.path.as_str()).collect();
    assert!(paths.contains(&"scripts/check.sh"));
    // scripts/ are digested but not readable resources.
    assert!(!skill.resources().any(|p| p.starts_with("scripts/")));
    fs::write(
        root.join("invoice-review/scripts/check.sh"),
        "#!/bin/sh\necho changed\n",
    )
    .unwrap();
    let c = SkillRegistry::from_paths([&root]).unwrap();
    assert_ne!(c.get("invoice-review").unwrap().digest(), da);
}

fn locked_catalog() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let (d, root) = catalog();
    let lock = root.join(LOCKFILE_NAME);
    SkillRegistry::from_paths([&root])
        .unwrap()
        .lockfile()
        .write(&lock)
        .unwrap();
    (d, root, lock)
}

fn mismatches(root: &Path, lock: &Path) -> Vec<LockMismatch> {
    match SkillRegistry::from_paths_with_lockfile([root], lock) {
        Err(SkillError::LockMismatch { mismatches, .. }) => mismatches,
        other => panic!("expected a lock mismatch, got {other:?}"),
    }
}

#[test]
fn lockfile_round_trip_matches() {
    let (_d, root, lock) = locked_catalog();
    let registry = SkillRegistry::from_paths_with_lockfile([&root], &lock).unwrap();
    assert_eq!(registry.len(), 2);
    let parsed = Lockfile::read(&lock).unwrap();
    let entry = parsed.skills.iter().find(|e| e.name == "invoice-review").unwrap();
    assert_eq!(entry.catalog, "skills");
    assert_eq!(entry.version.as_deref(), Some("1.0.0"));
    assert_eq!(entry.source, "fs:skills/invoice-review");
    assert!(entry.files.contains_key("scripts/check.sh"));
    // The lockfile text is stable.
    assert_eq!(fs::read_to_string(&lock).unwrap(), registry.lockfile().to_json());
}

#[test]
fn lockfile_detects_a_changed_byte_in_references() {
    let (_d, root, lock) = locked_catalog();
    write(
        &root.join("invoice-review/references/policy.md"),
        "Invoices above 1001 need approval.\n",
    );
    assert_eq!(
        mismatches(&root, &lock),
        [LockMismatch::FileChanged {
            name: "invoice-review".into(),
            path: "references/policy.md".into()
        }]
    );
}

#[test]
fn lockfile_detects_a_changed_byte_in_scripts() {
    let (_d, root, lock) = locked_catalog();
    write(
        &root.join("invoice-review/scripts/check.sh"),
        "#!/bin/sh\necho check!\n",
    );
    let m = mismatches(&root, &lock);
    assert_eq!(
        m,
        [LockMismatch::FileChanged {
            name: "invoice-review".into(),
            path: "scripts/check.sh".into()
        }]
    );
    let err = SkillRegistry::from_paths_with_lockfile([&root], &lock)
        .unwrap_err()
        .to_string();
    assert!(err.contains("invoice-review: file scripts/check.sh changed"), "{err}");
}

#[test]
fn lockfile_detects_an_added_skill() {
    let (_d, root, lock) = locked_catalog();
    write(&root.join("newcomer/SKILL.md"), &skill_md("newcomer", "1.0.0"));
    assert_eq!(
        mismatches(&root, &lock),
        [LockMismatch::SkillAdded {
            name: "newcomer".into()
        }]
    );
}

#[test]
fn lockfile_detects_a_removed_skill() {
    let (_d, root, lock) = locked_catalog();
    fs::remove_dir_all(root.join("other")).unwrap();
    assert_eq!(
        mismatches(&root, &lock),
        [LockMismatch::SkillRemoved { name: "other".into() }]
    );
}

#[test]
fn lockfile_detects_added_and_removed_files_and_versions() {
    let (_d, root, lock) = locked_catalog();
    write(&root.join("invoice-review/references/new.md"), "new");
    fs::remove_file(root.join("invoice-review/assets/report-template.md")).unwrap();
    write(&root.join("other/SKILL.md"), &skill_md("other", "0.2.0"));
    let m = mismatches(&root, &lock);
    assert!(m.contains(&LockMismatch::FileAdded {
        name: "invoice-review".into(),
        path: "references/new.md".into()
    }));
    assert!(m.contains(&LockMismatch::FileRemoved {
        name: "invoice-review".into(),
        path: "assets/report-template.md".into()
    }));
    assert!(m.contains(&LockMismatch::VersionChanged {
        name: "other".into(),
        locked: Some("0.1.0".into()),
        found: Some("0.2.0".into())
    }));
}

#[test]
fn malformed_or_missing_lockfile_is_a_typed_error() {
    let (_d, root) = catalog();
    let lock = root.join(LOCKFILE_NAME);
    assert!(matches!(
        SkillRegistry::from_paths_with_lockfile([&root], &lock),
        Err(SkillError::Lockfile { .. })
    ));
    fs::write(&lock, "{\"version\": 99, \"skills\": []}").unwrap();
    let e = SkillRegistry::from_paths_with_lockfile([&root], &lock).unwrap_err();
    assert!(
        matches!(e, SkillError::Lockfile { .. }) && e.to_string().contains("99"),
        "{e}"
    );
}

#[test]
fn example_catalog_matches_its_lockfile() {
    let catalog = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/skills");
    let registry = SkillRegistry::from_paths_with_lockfile([&catalog], catalog.join(LOCKFILE_NAME)).unwrap();
    let skill = registry.get("invoice-review").unwrap();
    assert_eq!(skill.manifest().version(), Some("1.0.0"));
    assert!(
        skill
            .files()
            .iter()
            .any(|f| f.path == "scripts/check-totals.sh" && !f.readable)
    );
    assert_eq!(
        skill.resources().collect::<Vec<_>>(),
        ["assets/report-template.md", "references/policy.md"]
    );
}
