//! [`SkillRegistry`]: validated skills from one or more catalogs, their digests and the
//! lockfile that pins them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{LockMismatch, PathRefusal, SkillError, ValidationRule};
use crate::manifest::SkillManifest;
use crate::source::{FilesystemSkillSource, SkillSource, check_relative_path};

/// The lockfile's conventional name, inside a catalog folder.
pub const LOCKFILE_NAME: &str = "skills.lock.json";

/// The lockfile format version written by this crate.
pub const LOCKFILE_VERSION: u32 = 1;

/// One file of a skill.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillFile {
    /// Its path relative to the skill folder (`references/policy.md`).
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
    /// `sha256:` and the hex SHA-256 of its content.
    pub sha256: String,
    /// Whether the resource tools may read it: under `references/` or `assets/`, and UTF-8
    /// text without NUL bytes.
    pub readable: bool,
}

/// A loaded, validated skill.
pub struct Skill {
    manifest: SkillManifest,
    catalog: String,
    source_id: String,
    files: Vec<SkillFile>,
    digest: String,
    source: Arc<dyn SkillSource>,
}

impl fmt::Debug for Skill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Skill")
            .field("name", &self.manifest.name)
            .field("catalog", &self.catalog)
            .field("digest", &self.digest)
            .finish_non_exhaustive()
    }
}

impl Skill {
    /// Loads and validates one skill of a source: every file is read and digested, `SKILL.md`
    /// parsed. Returns every rule broken.
    pub fn load(source: &Arc<dyn SkillSource>, name: &str) -> Result<Skill, Vec<SkillError>> {
        let catalog = source.catalog().to_owned();
        let files = source.list_files(name).map_err(|e| vec![e])?;
        if !files.iter().any(|f| f == "SKILL.md") {
            return Err(vec![SkillError::validation(
                format!("{catalog}/{name}"),
                None,
                ValidationRule::MissingSkillMd,
                "the skill folder has no SKILL.md (run `modu skills init NAME --path DIR` to create one)",
            )]);
        }
        let mut skill_md = Vec::new();
        let mut entries = Vec::with_capacity(files.len());
        let mut whole = Sha256::new();
        for path in files {
            let bytes = source.read(name, &path).map_err(|e| vec![e])?;
            whole.update(path.as_bytes());
            whole.update([0u8]);
            whole.update((bytes.len() as u64).to_be_bytes());
            whole.update(&bytes);
            let readable = is_resource_path(&path) && is_text(&bytes);
            entries.push(SkillFile {
                sha256: sha256_hex(&bytes),
                size: bytes.len() as u64,
                path: path.clone(),
                readable,
            });
            if path == "SKILL.md" {
                skill_md = bytes;
            }
        }
        let label = format!("{catalog}/{name}/SKILL.md");
        let text = String::from_utf8(skill_md).map_err(|e| {
            let at = e.utf8_error().valid_up_to();
            let line = e.as_bytes()[..at].iter().filter(|b| **b == b'\n').count() + 1;
            vec![SkillError::validation(
                label.clone(),
                Some(line),
                ValidationRule::NotUtf8,
                format!("SKILL.md is not UTF-8 text (byte {at}); save it as UTF-8"),
            )]
        })?;
        let manifest = SkillManifest::parse_all(&label, Some(name), &text)?;
        Ok(Skill {
            manifest,
            source_id: source.source_id(name),
            catalog,
            files: entries,
            digest: format!("sha256:{}", hex(&whole.finalize())),
            source: Arc::clone(source),
        })
    }

    /// The skill's name.
    pub fn name(&self) -> &str {
        &self.manifest.name
    }

    /// The parsed `SKILL.md`.
    pub fn manifest(&self) -> &SkillManifest {
        &self.manifest
    }

    /// The catalog the skill comes from.
    pub fn catalog(&self) -> &str {
        &self.catalog
    }

    /// Where the skill comes from (`fs:skills/invoice-review`).
    pub fn source_id(&self) -> &str {
        &self.source_id
    }

    /// Every file of the skill (`scripts/` included), sorted by path.
    pub fn files(&self) -> &[SkillFile] {
        &self.files
    }

    /// The paths the resource tools may read.
    pub fn resources(&self) -> impl Iterator<Item = &str> {
        self.files.iter().filter(|f| f.readable).map(|f| f.path.as_str())
    }

    /// `sha256:` and the hex SHA-256 over every file: for each file in path order, its path,
    /// a NUL byte, its length as 8 big-endian bytes and its content.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Reads a resource: a UTF-8 text file under `references/` or `assets/` that existed, with
    /// the same content, when the skill was loaded. `scripts/` and everything else are refused,
    /// as are binary files, files added or changed since loading, and any path the source
    /// refuses (`..`, absolute, symbolic links).
    pub fn read_resource(&self, path: &str) -> Result<String, SkillError> {
        let name = self.name();
        check_relative_path(name, path)?;
        if !is_resource_path(path) {
            return Err(SkillError::refused(
                name,
                path,
                PathRefusal::OutsideResources,
                "only files under references/ and assets/ can be read (scripts/ never)",
            ));
        }
        let Some(entry) = self.files.iter().find(|f| f.path == path) else {
            return Err(SkillError::NotFound {
                path: format!("{}/{name}/{path}", self.catalog),
            });
        };
        let bytes = self.source.read(name, path)?;
        if sha256_hex(&bytes) != entry.sha256 {
            return Err(SkillError::refused(
                name,
                path,
                PathRefusal::Changed,
                "the file changed since the registry was loaded",
            ));
        }
        if !is_text(&bytes) {
            return Err(SkillError::refused(
                name,
                path,
                PathRefusal::Binary,
                "binary files are not readable; only UTF-8 text",
            ));
        }
        String::from_utf8(bytes).map_err(|_| {
            SkillError::refused(
                name,
                path,
                PathRefusal::Binary,
                "binary files are not readable; only UTF-8 text",
            )
        })
    }
}

fn is_resource_path(path: &str) -> bool {
    (path.starts_with("references/") || path.starts_with("assets/")) && path.split('/').count() >= 2
}

/// UTF-8 without NUL bytes.
fn is_text(bytes: &[u8]) -> bool {
    !bytes.contains(&0) && std::str::from_utf8(bytes).is_ok()
}

fn sha256_hex(bytes: &[u8]) -> String {
    format!("sha256:{}", hex(&Sha256::digest(bytes)))
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    s
}

/// The result of scanning catalogs: the skills that loaded and every error found.
#[derive(Debug, Default)]
pub struct CatalogScan {
    /// Skills that passed validation.
    pub skills: Vec<Skill>,
    /// Every problem found, in catalog and skill order.
    pub errors: Vec<SkillError>,
}

/// Validated skills, by name, from one or more catalogs.
///
/// A registry is **agent-scoped**: every run of an agent can see (and, through automatic
/// selection, activate) every skill it holds. The catalogs are a trust boundary chosen by the
/// operator — review skills like code. Tenants that do not trust each other need separate
/// registries (one agent per tenant), or an access layer of their own in front of selection.
///
/// ```
/// use std::sync::Arc;
/// use modu_skills::{InMemorySkillSource, SkillRegistry};
/// let source = InMemorySkillSource::new("demo")
///     .with_file("a", "SKILL.md", "---\nname: a\ndescription: First.\n---\nA.\n");
/// let registry = SkillRegistry::from_sources(vec![Arc::new(source)]).unwrap();
/// let lock = registry.lockfile();
/// assert!(registry.verify(&lock, "in-memory").is_ok());
/// assert!(lock.skills[0].digest.starts_with("sha256:"));
/// ```
#[derive(Clone, Debug, Default)]
pub struct SkillRegistry {
    skills: BTreeMap<String, Arc<Skill>>,
}

impl SkillRegistry {
    /// Loads every skill folder under each catalog folder, failing on the first problem.
    pub fn from_paths<I, P>(paths: I) -> Result<SkillRegistry, SkillError>
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        Self::from_sources(filesystem_sources(paths)?)
    }

    /// [`SkillRegistry::from_paths`], then checks the skills against a lockfile written by
    /// `modu skills lock`: any added or removed skill, other catalog, source or version, or
    /// changed, added or removed file fails with [`SkillError::LockMismatch`] naming each.
    pub fn from_paths_with_lockfile<I, P>(paths: I, lockfile: impl AsRef<Path>) -> Result<SkillRegistry, SkillError>
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        let lock = Lockfile::read(lockfile.as_ref())?;
        let registry = Self::from_paths(paths)?;
        registry.verify(&lock, &lockfile.as_ref().display().to_string())?;
        Ok(registry)
    }

    /// Loads every skill of these sources, failing on the first problem.
    pub fn from_sources(sources: Vec<Arc<dyn SkillSource>>) -> Result<SkillRegistry, SkillError> {
        let mut scan = Self::scan(sources);
        if !scan.errors.is_empty() {
            return Err(scan.errors.remove(0));
        }
        Ok(Self::from_skills(scan.skills))
    }

    /// Loads what it can from these sources and reports every problem (for `modu skills
    /// validate`).
    pub fn scan(sources: Vec<Arc<dyn SkillSource>>) -> CatalogScan {
        let mut scan = CatalogScan::default();
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        for source in sources {
            let names = match source.skill_names() {
                Ok(names) => names,
                Err(e) => {
                    scan.errors.push(e);
                    continue;
                }
            };
            for name in names {
                match Skill::load(&source, &name) {
                    Ok(skill) => {
                        if let Some(other) = seen.get(skill.name()) {
                            scan.errors.push(SkillError::validation(
                                format!("{}/{name}", skill.catalog()),
                                None,
                                ValidationRule::DuplicateSkill,
                                format!("catalog {other} already has a skill named {name}; names must be unique"),
                            ));
                            continue;
                        }
                        seen.insert(skill.name().to_owned(), skill.catalog().to_owned());
                        scan.skills.push(skill);
                    }
                    Err(errors) => scan.errors.extend(errors),
                }
            }
        }
        scan
    }

    /// A registry of already loaded skills (the last one wins on duplicate names).
    pub fn from_skills(skills: impl IntoIterator<Item = Skill>) -> SkillRegistry {
        SkillRegistry {
            skills: skills.into_iter().map(|s| (s.name().to_owned(), Arc::new(s))).collect(),
        }
    }

    /// A skill by name.
    pub fn get(&self, name: &str) -> Option<&Arc<Skill>> {
        self.skills.get(name)
    }

    /// The skill names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.skills.keys().cloned().collect()
    }

    /// The skills, by name.
    pub fn skills(&self) -> impl Iterator<Item = &Arc<Skill>> {
        self.skills.values()
    }

    /// How many skills there are.
    pub fn len(&self) -> usize {
        self.skills.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    /// The lockfile pinning these skills.
    pub fn lockfile(&self) -> Lockfile {
        Lockfile {
            version: LOCKFILE_VERSION,
            skills: self
                .skills
                .values()
                .map(|s| LockEntry {
                    catalog: s.catalog.clone(),
                    name: s.name().to_owned(),
                    version: s.manifest.version().map(str::to_owned),
                    source: s.source_id.clone(),
                    digest: s.digest.clone(),
                    files: s.files.iter().map(|f| (f.path.clone(), f.sha256.clone())).collect(),
                })
                .collect(),
        }
    }

    /// Every difference between these skills and a lockfile (empty when they match).
    pub fn diff(&self, lock: &Lockfile) -> Vec<LockMismatch> {
        let mut out = Vec::new();
        let locked: BTreeMap<&str, &LockEntry> = lock.skills.iter().map(|e| (e.name.as_str(), e)).collect();
        for name in locked.keys() {
            if !self.skills.contains_key(*name) {
                out.push(LockMismatch::SkillRemoved {
                    name: (*name).to_owned(),
                });
            }
        }
        for (name, skill) in &self.skills {
            let Some(entry) = locked.get(name.as_str()) else {
                out.push(LockMismatch::SkillAdded { name: name.clone() });
                continue;
            };
            if entry.catalog != skill.catalog {
                out.push(LockMismatch::CatalogChanged {
                    name: name.clone(),
                    locked: entry.catalog.clone(),
                    found: skill.catalog.clone(),
                });
            }
            if entry.source != skill.source_id {
                out.push(LockMismatch::SourceChanged {
                    name: name.clone(),
                    locked: entry.source.clone(),
                    found: skill.source_id.clone(),
                });
            }
            let version = skill.manifest.version().map(str::to_owned);
            if entry.version != version {
                out.push(LockMismatch::VersionChanged {
                    name: name.clone(),
                    locked: entry.version.clone(),
                    found: version,
                });
            }
            let before = out.len();
            let current: BTreeMap<&str, &str> = skill
                .files
                .iter()
                .map(|f| (f.path.as_str(), f.sha256.as_str()))
                .collect();
            let paths: BTreeSet<&str> = current
                .keys()
                .copied()
                .chain(entry.files.keys().map(String::as_str))
                .collect();
            for path in paths {
                match (entry.files.get(path), current.get(path)) {
                    (Some(a), Some(b)) if a != b => out.push(LockMismatch::FileChanged {
                        name: name.clone(),
                        path: path.to_owned(),
                    }),
                    (None, Some(_)) => out.push(LockMismatch::FileAdded {
                        name: name.clone(),
                        path: path.to_owned(),
                    }),
                    (Some(_), None) => out.push(LockMismatch::FileRemoved {
                        name: name.clone(),
                        path: path.to_owned(),
                    }),
                    _ => {}
                }
            }
            if out.len() == before && entry.digest != skill.digest {
                out.push(LockMismatch::DigestChanged {
                    name: name.clone(),
                    locked: entry.digest.clone(),
                    found: skill.digest.clone(),
                });
            }
        }
        out
    }

    /// Fails with [`SkillError::LockMismatch`] when the skills differ from the lockfile.
    pub fn verify(&self, lock: &Lockfile, lockfile: &str) -> Result<(), SkillError> {
        let mismatches = self.diff(lock);
        if mismatches.is_empty() {
            Ok(())
        } else {
            Err(SkillError::LockMismatch {
                lockfile: lockfile.to_owned(),
                mismatches,
            })
        }
    }
}

/// One [`FilesystemSkillSource`] per catalog folder.
pub fn filesystem_sources<I, P>(paths: I) -> Result<Vec<Arc<dyn SkillSource>>, SkillError>
where
    I: IntoIterator<Item = P>,
    P: AsRef<Path>,
{
    paths
        .into_iter()
        .map(|p| FilesystemSkillSource::new(p).map(|s| Arc::new(s) as Arc<dyn SkillSource>))
        .collect()
}

/// `skills.lock.json`: what each skill was when it was reviewed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lockfile {
    /// The format version ([`LOCKFILE_VERSION`]).
    pub version: u32,
    /// The skills, by name.
    pub skills: Vec<LockEntry>,
}

/// One skill in a [`Lockfile`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockEntry {
    /// The catalog it came from.
    pub catalog: String,
    /// Its name.
    pub name: String,
    /// `metadata.version`.
    #[serde(default)]
    pub version: Option<String>,
    /// Where it came from ([`SkillSource::source_id`]).
    pub source: String,
    /// The skill digest ([`Skill::digest`]).
    pub digest: String,
    /// Each file's SHA-256, so a mismatch names the file.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
}

impl Lockfile {
    /// Reads and parses a lockfile.
    pub fn read(path: &Path) -> Result<Lockfile, SkillError> {
        let shown = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| SkillError::Lockfile {
            path: shown.clone(),
            message: format!("cannot read it: {e} (create it with `modu skills lock DIR`)"),
        })?;
        Self::parse(&bytes, &shown)
    }

    /// Parses lockfile JSON.
    pub fn parse(bytes: &[u8], shown: &str) -> Result<Lockfile, SkillError> {
        let lock: Lockfile = serde_json::from_slice(bytes).map_err(|e| SkillError::Lockfile {
            path: shown.to_owned(),
            message: format!("not a valid lockfile: {e}"),
        })?;
        if lock.version != LOCKFILE_VERSION {
            return Err(SkillError::Lockfile {
                path: shown.to_owned(),
                message: format!(
                    "lockfile version {} is not supported (this build reads {LOCKFILE_VERSION})",
                    lock.version
                ),
            });
        }
        Ok(lock)
    }

    /// Pretty JSON with a trailing newline (stable: skills and files are sorted).
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }

    /// Writes the lockfile.
    pub fn write(&self, path: &Path) -> Result<(), SkillError> {
        std::fs::write(path, self.to_json()).map_err(|e| SkillError::Io {
            path: path.display().to_string(),
            source: e,
        })
    }
}
