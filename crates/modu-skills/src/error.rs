//! The crate's error type.

use std::fmt;

/// A SKILL.md rule that a skill broke. Every rule has a stable snake_case id
/// ([`ValidationRule::id`]) that the CLI prints and tools can match on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ValidationRule {
    /// The skill folder has no `SKILL.md`.
    MissingSkillMd,
    /// `SKILL.md` does not start with a `---` front matter line.
    MissingFrontMatter,
    /// The front matter has no closing `---` line.
    UnterminatedFrontMatter,
    /// The front matter is not valid YAML, or not a mapping.
    InvalidYaml,
    /// `SKILL.md` is not UTF-8 text.
    NotUtf8,
    /// A top-level key that the format does not define.
    UnknownKey,
    /// A key holds the wrong kind of value (a list where a string is expected, …).
    FieldType,
    /// `name` is missing or empty.
    NameMissing,
    /// `name` is longer than 64 characters.
    NameTooLong,
    /// `name` has characters other than lowercase ASCII letters, digits and `-`.
    NameCharacters,
    /// `name` starts or ends with `-`, or has `--`.
    NameHyphens,
    /// `name` differs from the skill's folder name.
    NameFolderMismatch,
    /// `description` is missing or empty.
    DescriptionMissing,
    /// `description` is longer than 1024 characters.
    DescriptionTooLong,
    /// `compatibility` is empty or longer than 500 characters.
    CompatibilityLength,
    /// `applies-to` names a stage other than `plan`, `act`, `finalize`, or is empty.
    UnknownStage,
    /// `allowed-tools` has an entry that is not a valid tool name.
    AllowedToolsSyntax,
    /// A file in the skill folder is a symbolic link, or neither a file nor a folder.
    NotRegularFile,
    /// A regular file in the skill folder has more than one hard link: its content is shared
    /// with a path that may lie outside the skill, so it is refused like a symbolic link.
    HardLink,
    /// A file is larger than the source allows.
    FileTooLarge,
    /// Two catalogs hold a skill of the same name.
    DuplicateSkill,
}

impl ValidationRule {
    /// The rule's stable id (`"name_characters"`, …).
    pub fn id(self) -> &'static str {
        match self {
            ValidationRule::MissingSkillMd => "missing_skill_md",
            ValidationRule::MissingFrontMatter => "missing_front_matter",
            ValidationRule::UnterminatedFrontMatter => "unterminated_front_matter",
            ValidationRule::InvalidYaml => "invalid_yaml",
            ValidationRule::NotUtf8 => "not_utf8",
            ValidationRule::UnknownKey => "unknown_key",
            ValidationRule::FieldType => "field_type",
            ValidationRule::NameMissing => "name_missing",
            ValidationRule::NameTooLong => "name_too_long",
            ValidationRule::NameCharacters => "name_characters",
            ValidationRule::NameHyphens => "name_hyphens",
            ValidationRule::NameFolderMismatch => "name_folder_mismatch",
            ValidationRule::DescriptionMissing => "description_missing",
            ValidationRule::DescriptionTooLong => "description_too_long",
            ValidationRule::CompatibilityLength => "compatibility_length",
            ValidationRule::UnknownStage => "unknown_stage",
            ValidationRule::AllowedToolsSyntax => "allowed_tools_syntax",
            ValidationRule::NotRegularFile => "not_regular_file",
            ValidationRule::HardLink => "hard_link",
            ValidationRule::FileTooLarge => "file_too_large",
            ValidationRule::DuplicateSkill => "duplicate_skill",
        }
    }
}

impl fmt::Display for ValidationRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

/// Why a path inside a skill was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PathRefusal {
    /// Empty, or with an empty, `.` or `..` component, a NUL or a backslash.
    Malformed,
    /// `..` anywhere in the path.
    ParentComponent,
    /// An absolute path.
    Absolute,
    /// A component of the path is a symbolic link (found when opening with `O_NOFOLLOW`).
    Symlink,
    /// The path names something other than a regular file (a folder, a FIFO, a socket, a
    /// device).
    NotRegularFile,
    /// The file has more than one hard link (`st_nlink > 1`, checked on the opened file), so
    /// its content may be shared with a path outside the skill folder.
    HardLink,
    /// The path is outside `references/` and `assets/` (resource tools only).
    OutsideResources,
    /// The file is binary, or not UTF-8 text (resource tools only).
    Binary,
    /// The file changed since the registry was loaded (its digest differs).
    Changed,
}

impl PathRefusal {
    /// A stable snake_case id.
    pub fn id(self) -> &'static str {
        match self {
            PathRefusal::Malformed => "malformed",
            PathRefusal::ParentComponent => "parent_component",
            PathRefusal::Absolute => "absolute",
            PathRefusal::Symlink => "symlink",
            PathRefusal::NotRegularFile => "not_regular_file",
            PathRefusal::HardLink => "hard_link",
            PathRefusal::OutsideResources => "outside_resources",
            PathRefusal::Binary => "binary",
            PathRefusal::Changed => "changed",
        }
    }
}

impl fmt::Display for PathRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

/// One difference between a lockfile and the loaded catalogs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockMismatch {
    /// A skill is loaded that the lockfile does not list.
    SkillAdded {
        /// The skill.
        name: String,
    },
    /// The lockfile lists a skill that is not loaded.
    SkillRemoved {
        /// The skill.
        name: String,
    },
    /// The skill comes from another catalog.
    CatalogChanged {
        /// The skill.
        name: String,
        /// In the lockfile.
        locked: String,
        /// Loaded.
        found: String,
    },
    /// The skill comes from another source.
    SourceChanged {
        /// The skill.
        name: String,
        /// In the lockfile.
        locked: String,
        /// Loaded.
        found: String,
    },
    /// `metadata.version` differs.
    VersionChanged {
        /// The skill.
        name: String,
        /// In the lockfile.
        locked: Option<String>,
        /// Loaded.
        found: Option<String>,
    },
    /// A file's content differs (at least one byte).
    FileChanged {
        /// The skill.
        name: String,
        /// The file, relative to the skill folder.
        path: String,
    },
    /// A file exists that the lockfile does not list.
    FileAdded {
        /// The skill.
        name: String,
        /// The file, relative to the skill folder.
        path: String,
    },
    /// The lockfile lists a file that does not exist.
    FileRemoved {
        /// The skill.
        name: String,
        /// The file, relative to the skill folder.
        path: String,
    },
    /// The skill's digest differs (reported when no file-level difference explains it).
    DigestChanged {
        /// The skill.
        name: String,
        /// In the lockfile.
        locked: String,
        /// Computed.
        found: String,
    },
}

impl fmt::Display for LockMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockMismatch::SkillAdded { name } => write!(f, "skill {name} is not in the lockfile (added)"),
            LockMismatch::SkillRemoved { name } => write!(f, "skill {name} is in the lockfile but missing (removed)"),
            LockMismatch::CatalogChanged { name, locked, found } => {
                write!(f, "skill {name}: catalog is {found:?}, the lockfile says {locked:?}")
            }
            LockMismatch::SourceChanged { name, locked, found } => {
                write!(f, "skill {name}: source is {found:?}, the lockfile says {locked:?}")
            }
            LockMismatch::VersionChanged { name, locked, found } => write!(
                f,
                "skill {name}: version is {}, the lockfile says {}",
                found.as_deref().unwrap_or("(none)"),
                locked.as_deref().unwrap_or("(none)")
            ),
            LockMismatch::FileChanged { name, path } => write!(f, "skill {name}: file {path} changed"),
            LockMismatch::FileAdded { name, path } => write!(f, "skill {name}: file {path} was added"),
            LockMismatch::FileRemoved { name, path } => write!(f, "skill {name}: file {path} was removed"),
            LockMismatch::DigestChanged { name, locked, found } => {
                write!(f, "skill {name}: digest is {found}, the lockfile says {locked}")
            }
        }
    }
}

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SkillError {
    /// A skill breaks a rule of the format.
    #[error("{file}{}: {rule}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
    Validation {
        /// The file (or folder), as `catalog/skill/SKILL.md`.
        file: String,
        /// The 1-based line in the file, when known.
        line: Option<usize>,
        /// The rule broken.
        rule: ValidationRule,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A path was refused: it would leave the skill folder, goes through a link, or is not
    /// something the caller may read.
    #[error("path {path:?} in skill {skill} refused ({reason}): {message}")]
    PathRefused {
        /// The skill.
        skill: String,
        /// The path as given.
        path: String,
        /// Why.
        reason: PathRefusal,
        /// Details.
        message: String,
    },
    /// A file or folder does not exist.
    #[error("{path}: not found")]
    NotFound {
        /// What was looked for.
        path: String,
    },
    /// An I/O error.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// This platform has no `openat`/`O_NOFOLLOW`, so [`crate::FilesystemSkillSource`] cannot
    /// guarantee that reads stay inside a skill folder.
    #[error(
        "FilesystemSkillSource needs POSIX openat with O_NOFOLLOW, which this platform lacks; \
         use InMemorySkillSource or a custom SkillSource with the same isolation guarantees"
    )]
    UnsupportedPlatform,
    /// The lockfile cannot be read or parsed.
    #[error("lockfile {path}: {message}")]
    Lockfile {
        /// The lockfile.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The loaded catalogs differ from the lockfile.
    #[error("the skills differ from lockfile {lockfile}: {}", mismatches.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    LockMismatch {
        /// The lockfile.
        lockfile: String,
        /// Every difference found.
        mismatches: Vec<LockMismatch>,
    },
    /// A run asked for a skill the registry does not have.
    #[error("unknown skill {name:?}; the registry has: {}", available.join(", "))]
    UnknownSkill {
        /// The name asked for.
        name: String,
        /// The names the registry has.
        available: Vec<String>,
    },
    /// The run's skill options (`skills`, `skill_mode`) are malformed.
    #[error("invalid skill options: {message}")]
    InvalidOptions {
        /// What is wrong.
        message: String,
    },
    /// Automatic selection failed (the selector model call, or its answer).
    #[error("skill selection failed: {message}")]
    Selection {
        /// What went wrong.
        message: String,
    },
}

impl SkillError {
    pub(crate) fn validation(
        file: impl Into<String>,
        line: Option<usize>,
        rule: ValidationRule,
        message: impl Into<String>,
    ) -> Self {
        SkillError::Validation {
            file: file.into(),
            line,
            rule,
            message: message.into(),
        }
    }

    pub(crate) fn refused(skill: &str, path: &str, reason: PathRefusal, message: impl Into<String>) -> Self {
        SkillError::PathRefused {
            skill: skill.to_owned(),
            path: path.to_owned(),
            reason,
            message: message.into(),
        }
    }

    /// The broken rule, for validation errors.
    pub fn rule(&self) -> Option<ValidationRule> {
        match self {
            SkillError::Validation { rule, .. } => Some(*rule),
            _ => None,
        }
    }

    /// The refusal reason, for refused paths.
    pub fn refusal(&self) -> Option<PathRefusal> {
        match self {
            SkillError::PathRefused { reason, .. } => Some(*reason),
            _ => None,
        }
    }
}
