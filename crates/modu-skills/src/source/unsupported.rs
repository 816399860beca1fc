//! [`FilesystemSkillSource`] where `openat`/`O_NOFOLLOW` are missing (not unix): it always
//! fails with [`SkillError::UnsupportedPlatform`].

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
