#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod error;
pub mod manifest;
pub mod registry;
pub mod runtime;
pub mod source;

pub use error::{LockMismatch, PathRefusal, SkillError, ValidationRule};
pub use manifest::{KNOWN_KEYS, SkillManifest, check_name};
pub use registry::{
    CatalogScan, LOCKFILE_NAME, LOCKFILE_VERSION, LockEntry, Lockfile, Skill, SkillFile, SkillRegistry,
    filesystem_sources,
};
pub use runtime::{
    METADATA_SKILL_MODE, METADATA_SKILLS, ModelSkillSelector, READ_TOOL, SEARCH_TOOL, SkillCandidate, SkillLimits,
    SkillMode, SkillSelection, SkillSelector, SkillsProvider,
};
pub use source::{FilesystemSkillSource, InMemorySkillSource, SkillSource, check_relative_path};
