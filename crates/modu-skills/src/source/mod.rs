//! Where skills come from: [`SkillSource`], [`FilesystemSkillSource`] and
//! [`InMemorySkillSource`].
//!
//! A source answers three questions: which skill folders exist, which files each holds, and
//! what a file contains. Every path is relative to a skill folder; a source must never let a
//! path leave it. [`check_relative_path`] refuses the malformed ones (`..`, absolute, empty
//! components) for every source; [`FilesystemSkillSource`] also opens each component with
//! `openat` and `O_NOFOLLOW`, so a symbolic link anywhere in the path — including one swapped in
//! after the catalog was validated — is refused by the kernel, not by a check that can race.
//! It also refuses every regular file with more than one hard link (`st_nlink > 1`), when
//! listing and on every read (checked with `fstat` on the opened file), since a hard link
//! shares its content with a path that may lie outside the skill folder.

#[cfg(unix)]
mod filesystem;
mod memory;
#[cfg(not(unix))]
mod unsupported;

use std::fmt;

use crate::error::{PathRefusal, SkillError};

#[cfg(unix)]
pub use filesystem::FilesystemSkillSource;
pub use memory::InMemorySkillSource;
#[cfg(not(unix))]
pub use unsupported::FilesystemSkillSource;

/// The largest file a source reads by default (4 MiB).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// A catalog of skill folders.
///
/// Implementations must confine every read to the named skill's folder: call
/// [`check_relative_path`] first, never follow symbolic links, and never read a file whose
/// content is shared with a path outside the folder (on disk: a regular file with more than
/// one hard link).
pub trait SkillSource: Send + Sync + fmt::Debug {
    /// The catalog's name (a filesystem catalog's folder name), recorded in lockfiles.
    fn catalog(&self) -> &str;

    /// Where a skill comes from, recorded in lockfiles (`"fs:skills/invoice-review"`).
    fn source_id(&self, skill: &str) -> String;

    /// The names of the skill folders, sorted.
    fn skill_names(&self) -> Result<Vec<String>, SkillError>;

    /// Every file of a skill, as `/`-separated paths relative to its folder, sorted by bytes.
    /// A symbolic link, a special file or a file with more than one hard link in the folder is
    /// an error.
    fn list_files(&self, skill: &str) -> Result<Vec<String>, SkillError>;

    /// A file's bytes.
    fn read(&self, skill: &str, path: &str) -> Result<Vec<u8>, SkillError>;
}

/// Splits a path relative to a skill folder into its components, refusing absolute paths,
/// `..`, `.`, empty components, backslashes and NULs.
///
/// ```
/// use modu_skills::{check_relative_path, PathRefusal};
/// assert_eq!(check_relative_path("s", "references/a.md").unwrap(), ["references", "a.md"]);
/// assert_eq!(check_relative_path("s", "../x").unwrap_err().refusal(), Some(PathRefusal::ParentComponent));
/// assert_eq!(check_relative_path("s", "/etc/passwd").unwrap_err().refusal(), Some(PathRefusal::Absolute));
/// ```
pub fn check_relative_path<'a>(skill: &str, path: &'a str) -> Result<Vec<&'a str>, SkillError> {
    let refuse = |reason, message: &str| Err(SkillError::refused(skill, path, reason, message));
    if path.is_empty() {
        return refuse(PathRefusal::Malformed, "the path is empty");
    }
    let bytes = path.as_bytes();
    if path.starts_with('/')
        || path.starts_with('\\')
        || (bytes.len() >= 2 && bytes[1] == b':' && bytes[0].is_ascii_alphabetic())
    {
        return refuse(
            PathRefusal::Absolute,
            "absolute paths are refused; give a path inside the skill folder",
        );
    }
    if path.contains('\0') || path.contains('\\') {
        return refuse(PathRefusal::Malformed, "the path contains a NUL or a backslash");
    }
    let parts: Vec<&str> = path.split('/').collect();
    if parts.contains(&"..") {
        return refuse(
            PathRefusal::ParentComponent,
            "'..' is refused: paths stay inside the skill folder",
        );
    }
    if parts.iter().any(|p| p.is_empty() || *p == ".") {
        return refuse(PathRefusal::Malformed, "the path has an empty or '.' component");
    }
    Ok(parts)
}

fn check_skill_component(skill: &str) -> Result<(), SkillError> {
    let parts = check_relative_path(skill, skill)?;
    if parts.len() != 1 {
        return Err(SkillError::refused(
            skill,
            skill,
            PathRefusal::Malformed,
            "a skill name is a single folder name",
        ));
    }
    Ok(())
}
