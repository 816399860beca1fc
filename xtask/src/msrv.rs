//! `msrv` (a step of `cargo xtask ci`): the workspace's `rust-version` is checked, not just
//! declared. The whole workspace (all features, all targets) is checked with exactly that
//! toolchain (`cargo +1.95.0 check`), whatever `stable` is on the machine. No crate may declare
//! a `rust-version` of its own below the workspace's.

use std::path::Path;
use std::process::Command;

/// The toolchain that checks `rust-version` (`1.95` → `1.95.0`).
pub fn toolchain(rust_version: &str) -> Result<String, String> {
    let parts: Vec<&str> = rust_version.split('.').collect();
    let numeric = parts
        .iter()
        .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    match (numeric, parts.len()) {
        (true, 2) => Ok(format!("{rust_version}.0")),
        (true, 3) => Ok(rust_version.to_owned()),
        _ => Err(format!(
            "rust-version {rust_version:?} is not MAJOR.MINOR or MAJOR.MINOR.PATCH"
        )),
    }
}

/// The workspace's `[workspace.package] rust-version`.
pub fn workspace_rust_version(root_manifest: &str) -> Result<String, String> {
    let doc: toml::Table = root_manifest.parse().map_err(|e| format!("Cargo.toml: {e}"))?;
    doc.get("workspace")
        .and_then(|w| w.get("package"))
        .and_then(|p| p.get("rust-version"))
        .and_then(toml::Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| "Cargo.toml has no [workspace.package] rust-version".to_owned())
}

/// A crate manifest's own `rust-version` when it is below the workspace's (a crate that says it
/// builds on an older Rust than CI checks).
pub fn below_workspace(crate_manifest: &str, workspace: &str) -> Option<String> {
    let doc: toml::Table = crate_manifest.parse().ok()?;
    let own = doc.get("package")?.get("rust-version")?.as_str()?;
    let key = |v: &str| -> Vec<u64> { v.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    let (mut a, mut b) = (key(own), key(workspace));
    a.resize(3, 0);
    b.resize(3, 0);
    (a < b).then(|| own.to_owned())
}

/// The step: every crate's `rust-version` is at least the workspace's, and the workspace checks
/// with that toolchain.
pub fn run(root: &Path) -> Result<(), String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).map_err(|e| format!("Cargo.toml: {e}"))?;
    let version = workspace_rust_version(&manifest)?;
    let toolchain = toolchain(&version)?;
    for dir in super::tidy::deps::manifest_dirs(&manifest)? {
        let path = root.join(&dir).join("Cargo.toml");
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if let Some(own) = below_workspace(&text, &version) {
            return Err(format!(
                "{dir}/Cargo.toml declares rust-version {own}, below the workspace's {version}, which is all CI checks"
            ));
        }
    }
    let mut cmd = Command::new("cargo");
    cmd.arg(format!("+{toolchain}"))
        .args(["check", "--workspace", "--all-features", "--all-targets", "--locked"]);
    super::run(
        &format!("msrv: the workspace on Rust {toolchain} (rust-version {version})"),
        &mut cmd,
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_toolchain_is_the_rust_version_with_a_patch() {
        assert_eq!(toolchain("1.95").unwrap(), "1.95.0");
        assert_eq!(toolchain("1.95.1").unwrap(), "1.95.1");
        assert!(toolchain("1.95-nightly").is_err());
        assert!(toolchain("stable").is_err());
        assert!(toolchain("1..2").is_err());
    }

    #[test]
    fn the_workspace_rust_version_is_read() {
        let manifest = "[workspace]\nmembers = []\n[workspace.package]\nrust-version = \"1.95\"\n";
        assert_eq!(workspace_rust_version(manifest).unwrap(), "1.95");
        assert!(workspace_rust_version("[workspace]\nmembers = []\n").is_err());
    }

    #[test]
    fn a_crate_below_the_workspace_is_found() {
        let own = |v: &str| format!("[package]\nname = \"x\"\nrust-version = \"{v}\"\n");
        assert_eq!(below_workspace(&own("1.90"), "1.95").as_deref(), Some("1.90"));
        assert_eq!(below_workspace(&own("1.95.0"), "1.95"), None);
        assert_eq!(below_workspace(&own("1.96"), "1.95"), None);
        let inherited = "[package]\nname = \"x\"\nrust-version.workspace = true\n";
        assert_eq!(below_workspace(inherited, "1.95"), None);
    }
}
