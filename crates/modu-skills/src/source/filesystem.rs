//! [`FilesystemSkillSource`] on unix: skill folders on disk, read with `openat` and
//! `O_NOFOLLOW`, one component at a time.

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

    fn open_error(&self, e: Errno, dir: &OwnedFd, name: &str, skill: &str, path: &str, want_dir: bool) -> SkillError {
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
