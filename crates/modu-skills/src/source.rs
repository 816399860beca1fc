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

use std::collections::BTreeMap;
use std::fmt;

use crate::error::{PathRefusal, SkillError};

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

/// Skills held in memory: for tests, and for catalogs embedded in a binary
/// (`include_str!`/`include_bytes!`).
///
/// ```
/// use modu_skills::{InMemorySkillSource, SkillRegistry};
/// let source = InMemorySkillSource::new("embedded")
///     .with_file("greeter", "SKILL.md", "---\nname: greeter\ndescription: Greets people.\n---\nSay hello.\n")
///     .with_file("greeter", "references/phrases.md", "Hello! Hi!");
/// let registry = SkillRegistry::from_sources(vec![std::sync::Arc::new(source)]).unwrap();
/// assert_eq!(registry.names(), ["greeter"]);
/// ```
#[derive(Clone, Debug, Default)]
pub struct InMemorySkillSource {
    catalog: String,
    skills: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
}

impl InMemorySkillSource {
    /// An empty catalog with this name.
    pub fn new(catalog: impl Into<String>) -> Self {
        InMemorySkillSource {
            catalog: catalog.into(),
            skills: BTreeMap::new(),
        }
    }

    /// Adds (or replaces) a file of a skill.
    pub fn with_file(mut self, skill: impl Into<String>, path: impl Into<String>, bytes: impl Into<Vec<u8>>) -> Self {
        self.insert_file(skill, path, bytes);
        self
    }

    /// Adds (or replaces) a file of a skill.
    pub fn insert_file(&mut self, skill: impl Into<String>, path: impl Into<String>, bytes: impl Into<Vec<u8>>) {
        self.skills
            .entry(skill.into())
            .or_default()
            .insert(path.into(), bytes.into());
    }

    /// Removes a file (or, with `None`, a whole skill).
    pub fn remove(&mut self, skill: &str, path: Option<&str>) {
        match path {
            None => {
                self.skills.remove(skill);
            }
            Some(p) => {
                if let Some(files) = self.skills.get_mut(skill) {
                    files.remove(p);
                }
            }
        }
    }
}

impl SkillSource for InMemorySkillSource {
    fn catalog(&self) -> &str {
        &self.catalog
    }

    fn source_id(&self, skill: &str) -> String {
        format!("memory:{}/{skill}", self.catalog)
    }

    fn skill_names(&self) -> Result<Vec<String>, SkillError> {
        Ok(self.skills.keys().cloned().collect())
    }

    fn list_files(&self, skill: &str) -> Result<Vec<String>, SkillError> {
        check_skill_component(skill)?;
        let files = self.skills.get(skill).ok_or_else(|| SkillError::NotFound {
            path: format!("{}/{skill}", self.catalog),
        })?;
        let mut out = Vec::with_capacity(files.len());
        for path in files.keys() {
            check_relative_path(skill, path)?;
            out.push(path.clone());
        }
        out.sort();
        Ok(out)
    }

    fn read(&self, skill: &str, path: &str) -> Result<Vec<u8>, SkillError> {
        check_skill_component(skill)?;
        check_relative_path(skill, path)?;
        self.skills
            .get(skill)
            .and_then(|files| files.get(path))
            .cloned()
            .ok_or_else(|| SkillError::NotFound {
                path: format!("{}/{skill}/{path}", self.catalog),
            })
    }
}

pub use fs_source::FilesystemSkillSource;

#[cfg(unix)]
mod fs_source {
    use std::ffi::OsStr;
    use std::io::Read;
    use std::os::fd::OwnedFd;
    use std::os::unix::ffi::OsStrExt;
    use std::path::{Path, PathBuf};

    use rustix::fs::{AtFlags, CWD, Dir, FileType, Mode, OFlags};
    use rustix::io::Errno;

    use super::{DEFAULT_MAX_FILE_BYTES, SkillSource, check_relative_path, check_skill_component};
    use crate::error::{PathRefusal, SkillError, ValidationRule};

    const MAX_DEPTH: usize = 16;

    /// Skill folders on disk, under one catalog folder.
    ///
    /// Every file is opened relative to its skill folder, one component at a time, with
    /// `openat(2)` and `O_NOFOLLOW` (folders also with `O_DIRECTORY`): `..` and absolute paths
    /// are refused before any system call, and a symbolic link anywhere — the file, a folder in
    /// the middle of the path, or the skill folder itself, even one swapped in after the catalog
    /// was validated — makes the open fail, which is reported as
    /// [`PathRefusal::Symlink`]. Only regular files are read (never FIFOs, sockets or
    /// devices).
    ///
    /// **Hard links.** A hard link is not a link the kernel can refuse to follow: it is the file
    /// itself, under a second name that may lie outside the skill folder (`ln ~/secret.txt
    /// skills/x/references/notes.md`), and nothing in the path shows it. So a regular file with more than one link (`st_nlink > 1`) is refused: when the
    /// skill is listed ([`ValidationRule::HardLink`]) and on every read, where the count comes
    /// from `fstat` on the already-opened file, so the file checked is the file read
    /// ([`PathRefusal::HardLink`]). Copy such a file into the skill instead of linking it.
    ///
    /// The catalog folder itself is opened normally (it is the operator's choice). Only on
    /// unix; elsewhere [`FilesystemSkillSource::new`] returns
    /// [`SkillError::UnsupportedPlatform`].
    #[derive(Clone, Debug)]
    pub struct FilesystemSkillSource {
        root: PathBuf,
        catalog: String,
        max_file_bytes: u64,
    }

    impl FilesystemSkillSource {
        /// A source over the skill folders in `root`.
        pub fn new(root: impl AsRef<Path>) -> Result<Self, SkillError> {
            let root = root.as_ref().to_path_buf();
            let shown = root.display().to_string();
            rustix::fs::openat(
                CWD,
                &root,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| match e {
                Errno::NOENT => SkillError::NotFound { path: shown.clone() },
                e => SkillError::Io {
                    path: shown.clone(),
                    source: e.into(),
                },
            })?;
            let catalog = std::fs::canonicalize(&root)
                .ok()
                .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                .unwrap_or_else(|| "skills".to_owned());
            Ok(FilesystemSkillSource {
                root,
                catalog,
                max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            })
        }

        /// Sets the largest file read (default [`DEFAULT_MAX_FILE_BYTES`]).
        pub fn max_file_bytes(mut self, bytes: u64) -> Self {
            self.max_file_bytes = bytes;
            self
        }

        /// The catalog folder.
        pub fn root(&self) -> &Path {
            &self.root
        }

        fn label(&self, skill: &str, path: &str) -> String {
            if path.is_empty() {
                format!("{}/{skill}", self.catalog)
            } else {
                format!("{}/{skill}/{path}", self.catalog)
            }
        }

        fn open_root(&self) -> Result<OwnedFd, SkillError> {
            rustix::fs::openat(
                CWD,
                &self.root,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| SkillError::Io {
                path: self.root.display().to_string(),
                source: e.into(),
            })
        }

        /// Opens a folder under `dir` without following links.
        fn open_dir(&self, dir: &OwnedFd, name: &str, skill: &str, path: &str) -> Result<OwnedFd, SkillError> {
            rustix::fs::openat(
                dir,
                name,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| self.open_error(e, dir, name, skill, path, true))
        }

        fn open_error(
            &self,
            e: Errno,
            dir: &OwnedFd,
            name: &str,
            skill: &str,
            path: &str,
            want_dir: bool,
        ) -> SkillError {
            let shown = if path.is_empty() { skill } else { path };
            match e {
                Errno::LOOP | Errno::MLINK => SkillError::refused(
                    skill,
                    shown,
                    PathRefusal::Symlink,
                    format!("{name:?} is a symbolic link; links are never followed inside a skill"),
                ),
                Errno::NOTDIR => {
                    let is_link = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
                        .map(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink)
                        .unwrap_or(false);
                    if is_link {
                        SkillError::refused(
                            skill,
                            shown,
                            PathRefusal::Symlink,
                            format!("{name:?} is a symbolic link; links are never followed inside a skill"),
                        )
                    } else {
                        SkillError::refused(
                            skill,
                            shown,
                            PathRefusal::NotRegularFile,
                            format!("{name:?} is not a {}", if want_dir { "folder" } else { "regular file" }),
                        )
                    }
                }
                // open(2) on a unix socket (and on a device without a driver) fails with ENXIO.
                Errno::NXIO => SkillError::refused(
                    skill,
                    shown,
                    PathRefusal::NotRegularFile,
                    format!("{name:?} is not a {}", if want_dir { "folder" } else { "regular file" }),
                ),
                Errno::NOENT => SkillError::NotFound {
                    path: self.label(skill, path),
                },
                e => SkillError::Io {
                    path: self.label(skill, path),
                    source: e.into(),
                },
            }
        }

        fn open_skill(&self, skill: &str) -> Result<OwnedFd, SkillError> {
            check_skill_component(skill)?;
            let root = self.open_root()?;
            self.open_dir(&root, skill, skill, "")
        }

        fn walk(
            &self,
            skill: &str,
            dir: &OwnedFd,
            prefix: &str,
            depth: usize,
            out: &mut Vec<String>,
        ) -> Result<(), SkillError> {
            if depth > MAX_DEPTH {
                return Err(SkillError::validation(
                    self.label(skill, prefix),
                    None,
                    ValidationRule::NotRegularFile,
                    format!("folders nest deeper than {MAX_DEPTH} levels"),
                ));
            }
            let io = |e: Errno| SkillError::Io {
                path: self.label(skill, prefix),
                source: e.into(),
            };
            let mut names = Vec::new();
            for entry in Dir::read_from(dir).map_err(io)? {
                let entry = entry.map_err(io)?;
                let raw = entry.file_name().to_bytes();
                if raw == b"." || raw == b".." {
                    continue;
                }
                let Some(name) = std::str::from_utf8(raw).ok() else {
                    return Err(SkillError::validation(
                        self.label(skill, prefix),
                        None,
                        ValidationRule::NotRegularFile,
                        format!(
                            "file name {:?} is not UTF-8; rename it",
                            OsStr::from_bytes(raw).to_string_lossy()
                        ),
                    ));
                };
                names.push(name.to_owned());
            }
            names.sort();
            for name in names {
                let rel = if prefix.is_empty() {
                    name.clone()
                } else {
                    format!("{prefix}/{name}")
                };
                check_relative_path(skill, &rel)?;
                let st = rustix::fs::statat(dir, name.as_str(), AtFlags::SYMLINK_NOFOLLOW).map_err(io)?;
                match FileType::from_raw_mode(st.st_mode) {
                    FileType::RegularFile if st.st_nlink > 1 => {
                        return Err(SkillError::validation(
                            self.label(skill, &rel),
                            None,
                            ValidationRule::HardLink,
                            format!(
                                "has {} hard links; a skill file may have only one, since another \
                                 name can lie outside the skill (copy the file instead of linking it)",
                                st.st_nlink
                            ),
                        ));
                    }
                    FileType::RegularFile => out.push(rel),
                    FileType::Directory => {
                        let sub = self.open_dir(dir, &name, skill, &rel)?;
                        self.walk(skill, &sub, &rel, depth + 1, out)?;
                    }
                    FileType::Symlink => {
                        return Err(SkillError::validation(
                            self.label(skill, &rel),
                            None,
                            ValidationRule::NotRegularFile,
                            "is a symbolic link; skill folders may hold only regular files and folders (copy the target in)",
                        ));
                    }
                    _ => {
                        return Err(SkillError::validation(
                            self.label(skill, &rel),
                            None,
                            ValidationRule::NotRegularFile,
                            "is not a regular file or folder",
                        ));
                    }
                }
            }
            Ok(())
        }
    }

    impl SkillSource for FilesystemSkillSource {
        fn catalog(&self) -> &str {
            &self.catalog
        }

        fn source_id(&self, skill: &str) -> String {
            format!("fs:{}/{skill}", self.catalog)
        }

        fn skill_names(&self) -> Result<Vec<String>, SkillError> {
            let root = self.open_root()?;
            let io = |e: Errno| SkillError::Io {
                path: self.root.display().to_string(),
                source: e.into(),
            };
            let mut names = Vec::new();
            for entry in Dir::read_from(&root).map_err(io)? {
                let entry = entry.map_err(io)?;
                let raw = entry.file_name().to_bytes();
                if raw.starts_with(b".") {
                    continue;
                }
                let name = String::from_utf8_lossy(raw).into_owned();
                let Ok(st) = rustix::fs::statat(&root, raw, AtFlags::SYMLINK_NOFOLLOW) else {
                    continue;
                };
                match FileType::from_raw_mode(st.st_mode) {
                    FileType::Directory => names.push(name),
                    // A link to a folder is listed so that loading refuses it loudly.
                    FileType::Symlink => {
                        let target_is_dir = rustix::fs::statat(&root, raw, AtFlags::empty())
                            .map(|t| FileType::from_raw_mode(t.st_mode) == FileType::Directory)
                            .unwrap_or(false);
                        if target_is_dir {
                            names.push(name);
                        }
                    }
                    _ => {}
                }
            }
            names.sort();
            Ok(names)
        }

        fn list_files(&self, skill: &str) -> Result<Vec<String>, SkillError> {
            let dir = self.open_skill(skill)?;
            let mut out = Vec::new();
            self.walk(skill, &dir, "", 0, &mut out)?;
            out.sort();
            Ok(out)
        }

        fn read(&self, skill: &str, path: &str) -> Result<Vec<u8>, SkillError> {
            let parts = check_relative_path(skill, path)?;
            let mut dir = self.open_skill(skill)?;
            let (file, folders) = parts
                .split_last()
                .ok_or_else(|| SkillError::refused(skill, path, PathRefusal::Malformed, "the path is empty"))?;
            for folder in folders {
                dir = self.open_dir(&dir, folder, skill, path)?;
            }
            let fd = rustix::fs::openat(
                &dir,
                *file,
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
                Mode::empty(),
            )
            .map_err(|e| self.open_error(e, &dir, file, skill, path, false))?;
            let st = rustix::fs::fstat(&fd).map_err(|e| SkillError::Io {
                path: self.label(skill, path),
                source: e.into(),
            })?;
            if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
                return Err(SkillError::refused(
                    skill,
                    path,
                    PathRefusal::NotRegularFile,
                    "only regular files are read",
                ));
            }
            // Checked on the opened file: the inode whose links are counted is the one read.
            if st.st_nlink > 1 {
                return Err(SkillError::refused(
                    skill,
                    path,
                    PathRefusal::HardLink,
                    format!(
                        "the file has {} hard links; a skill file may have only one, since another \
                         name can lie outside the skill",
                        st.st_nlink
                    ),
                ));
            }
            if st.st_size as u64 > self.max_file_bytes {
                return Err(SkillError::validation(
                    self.label(skill, path),
                    None,
                    ValidationRule::FileTooLarge,
                    format!(
                        "the file has {} bytes; the limit is {}",
                        st.st_size, self.max_file_bytes
                    ),
                ));
            }
            let mut bytes = Vec::with_capacity(st.st_size as usize);
            std::fs::File::from(fd)
                .take(self.max_file_bytes + 1)
                .read_to_end(&mut bytes)
                .map_err(|e| SkillError::Io {
                    path: self.label(skill, path),
                    source: e,
                })?;
            if bytes.len() as u64 > self.max_file_bytes {
                return Err(SkillError::validation(
                    self.label(skill, path),
                    None,
                    ValidationRule::FileTooLarge,
                    format!("the file grew past the limit of {} bytes", self.max_file_bytes),
                ));
            }
            Ok(bytes)
        }
    }
}

#[cfg(not(unix))]
mod fs_source {
    use std::path::Path;

    use super::SkillSource;
    use crate::error::SkillError;

    /// Skill folders on disk. This platform lacks `openat`/`O_NOFOLLOW`, so
    /// [`FilesystemSkillSource::new`] always fails with [`SkillError::UnsupportedPlatform`]:
    /// use [`super::InMemorySkillSource`] or a custom [`SkillSource`].
    #[derive(Clone, Debug)]
    pub struct FilesystemSkillSource {
        never: std::convert::Infallible,
    }

    impl FilesystemSkillSource {
        /// Always [`SkillError::UnsupportedPlatform`] on this platform.
        pub fn new(_root: impl AsRef<Path>) -> Result<Self, SkillError> {
            Err(SkillError::UnsupportedPlatform)
        }

        /// Sets the largest file read.
        pub fn max_file_bytes(self, _bytes: u64) -> Self {
            self
        }
    }

    impl SkillSource for FilesystemSkillSource {
        fn catalog(&self) -> &str {
            match self.never {}
        }
        fn source_id(&self, _skill: &str) -> String {
            match self.never {}
        }
        fn skill_names(&self) -> Result<Vec<String>, SkillError> {
            match self.never {}
        }
        fn list_files(&self, _skill: &str) -> Result<Vec<String>, SkillError> {
            match self.never {}
        }
        fn read(&self, _skill: &str, _path: &str) -> Result<Vec<u8>, SkillError> {
            match self.never {}
        }
    }
}
