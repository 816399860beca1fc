//! `modu skills`: init, validate, inspect, lock.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Subcommand;
use modu::skills::{
    FilesystemSkillSource, LOCKFILE_NAME, Lockfile, Skill, SkillError, SkillRegistry, SkillSource, check_name,
};
use serde_json::json;

use super::{CommandResult, Failure};

/// `modu skills …`
#[derive(Debug, Subcommand)]
pub enum SkillsCommand {
    /// Create a skill folder with a SKILL.md template.
    Init {
        /// The skill's name: lowercase letters, digits and '-'.
        name: String,
        /// The catalog folder to create it in (created if missing).
        #[arg(long, default_value = ".")]
        path: PathBuf,
    },
    /// Check every skill of a catalog folder (or one skill folder), and its lockfile if present.
    Validate {
        /// A catalog folder (holding skill folders) or a skill folder (holding SKILL.md).
        dir: PathBuf,
    },
    /// Show the skills of a catalog folder (or one skill folder).
    Inspect {
        /// A catalog folder or a skill folder.
        dir: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write DIR/skills.lock.json pinning every skill's version, source and digest.
    Lock {
        /// A catalog folder.
        dir: PathBuf,
    },
}

/// Runs a `modu skills` command.
pub fn run(cmd: SkillsCommand) -> CommandResult {
    match cmd {
        SkillsCommand::Init { name, path } => init(&name, &path),
        SkillsCommand::Validate { dir } => validate(&dir),
        SkillsCommand::Inspect { dir, json } => inspect(&dir, json),
        SkillsCommand::Lock { dir } => lock(&dir),
    }
}

/// A source limited to one skill (when DIR is a skill folder).
#[derive(Debug)]
struct OneSkill {
    inner: FilesystemSkillSource,
    name: String,
}

impl SkillSource for OneSkill {
    fn catalog(&self) -> &str {
        self.inner.catalog()
    }
    fn source_id(&self, skill: &str) -> String {
        self.inner.source_id(skill)
    }
    fn skill_names(&self) -> Result<Vec<String>, SkillError> {
        Ok(vec![self.name.clone()])
    }
    fn list_files(&self, skill: &str) -> Result<Vec<String>, SkillError> {
        self.inner.list_files(skill)
    }
    fn read(&self, skill: &str, path: &str) -> Result<Vec<u8>, SkillError> {
        self.inner.read(skill, path)
    }
}

struct Target {
    source: Arc<dyn SkillSource>,
    /// The catalog folder, when DIR is one (lockfiles live there).
    catalog_dir: Option<PathBuf>,
}

fn open(dir: &Path) -> Result<Target, Failure> {
    if !dir.exists() {
        return Err(Failure::Usage(format!("{} does not exist", dir.display())));
    }
    if !dir.is_dir() {
        return Err(Failure::Usage(format!(
            "{} is not a folder; give a catalog folder or a skill folder",
            dir.display()
        )));
    }
    let fs_error = |e: SkillError| Failure::Invalid(e.to_string());
    if dir.join("SKILL.md").exists() {
        let full = std::fs::canonicalize(dir).map_err(|e| Failure::Usage(format!("{}: {e}", dir.display())))?;
        let (Some(parent), Some(name)) = (full.parent(), full.file_name()) else {
            return Err(Failure::Usage(format!("{} has no parent folder", dir.display())));
        };
        let inner = FilesystemSkillSource::new(parent).map_err(fs_error)?;
        return Ok(Target {
            source: Arc::new(OneSkill {
                inner,
                name: name.to_string_lossy().into_owned(),
            }),
            catalog_dir: None,
        });
    }
    Ok(Target {
        source: Arc::new(FilesystemSkillSource::new(dir).map_err(fs_error)?),
        catalog_dir: Some(dir.to_path_buf()),
    })
}

fn print_errors(errors: &[SkillError]) {
    for e in errors {
        eprintln!("{e}");
    }
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

fn init(name: &str, path: &Path) -> CommandResult {
    let problems = check_name(name);
    if !problems.is_empty() {
        let text: Vec<String> = problems
            .into_iter()
            .map(|(rule, msg)| format!("{rule}: {msg}"))
            .collect();
        return Err(Failure::Usage(format!(
            "invalid skill name {name:?}: {}",
            text.join("; ")
        )));
    }
    let folder = path.join(name);
    if folder.exists() {
        return Err(Failure::Invalid(format!(
            "{} already exists; choose another name or remove it",
            folder.display()
        )));
    }
    let write = |p: PathBuf, text: &str| -> CommandResult {
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Failure::Invalid(format!("{}: {e}", parent.display())))?;
        }
        std::fs::write(&p, text).map_err(|e| Failure::Invalid(format!("{}: {e}", p.display())))
    };
    let skill_md = format!(
        "---\n\
         name: {name}\n\
         description: Describe what this skill does and when to use it. Automatic selection sees only the name and this text.\n\
         metadata:\n  version: \"0.1.0\"\n\
         # allowed-tools: tool_a tool_b      (narrows the tools offered while the skill is active)\n\
         # applies-to: [plan, act, finalize] (omit for every stage)\n\
         ---\n\
         # {name}\n\n\
         1. Describe the procedure step by step.\n\
         2. Point to files under references/ that the model may read with modu_skill_read.\n\
         3. Say what not to guess.\n"
    );
    write(folder.join("SKILL.md"), &skill_md)?;
    write(
        folder.join("references/README.md"),
        "Reference material the model can read on demand (modu_skill_read, modu_skill_search).\n",
    )?;
    outln!("created {}", folder.join("SKILL.md").display())?;
    outln!(
        "next: edit the description and body, then run `modu skills validate {}`",
        path.display()
    )?;
    Ok(())
}

fn validate(dir: &Path) -> CommandResult {
    let target = open(dir)?;
    let scan = SkillRegistry::scan(vec![Arc::clone(&target.source)]);
    let checked = scan.skills.len() + count_failed(&scan.errors);
    print_errors(&scan.errors);
    if checked == 0 && scan.errors.is_empty() {
        return Err(Failure::Invalid(format!(
            "no skills found in {} (a skill is a folder holding SKILL.md)",
            dir.display()
        )));
    }
    let mut problems = scan.errors.len();
    let registry = SkillRegistry::from_skills(scan.skills);
    let mut lock_note = String::new();
    if let Some(catalog) = &target.catalog_dir {
        let lock_path = catalog.join(LOCKFILE_NAME);
        if lock_path.exists() {
            match Lockfile::read(&lock_path) {
                Err(e) => {
                    eprintln!("{e}");
                    problems += 1;
                }
                Ok(lock) if problems == 0 => {
                    let mismatches = registry.diff(&lock);
                    for m in &mismatches {
                        eprintln!("{}: {m}", lock_path.display());
                    }
                    problems += mismatches.len();
                    if mismatches.is_empty() {
                        lock_note = format!("; matches {}", lock_path.display());
                    } else {
                        lock_note = format!(
                            "; differs from {} (run `modu skills lock {}` after reviewing the changes)",
                            lock_path.display(),
                            catalog.display()
                        );
                    }
                }
                Ok(_) => {}
            }
        }
    }
    if problems > 0 {
        return Err(Failure::Invalid(format!(
            "{} checked, {} valid, {}{lock_note}",
            plural(checked.max(registry.len()), "skill"),
            registry.len(),
            plural(problems, "problem")
        )));
    }
    outln!("ok: {} valid{lock_note}", plural(registry.len(), "skill"))?;
    Ok(())
}

/// How many distinct skills the errors belong to (for the summary).
fn count_failed(errors: &[SkillError]) -> usize {
    let mut skills: Vec<String> = errors
        .iter()
        .map(|e| match e {
            SkillError::Validation { file, .. } => file.split('/').take(2).collect::<Vec<_>>().join("/"),
            SkillError::PathRefused { skill, .. } => skill.clone(),
            other => other.to_string(),
        })
        .collect();
    skills.sort();
    skills.dedup();
    skills.len()
}

fn skill_json(skill: &Skill) -> serde_json::Value {
    let m = skill.manifest();
    json!({
        "name": m.name,
        "description": m.description,
        "version": m.version(),
        "metadata": m.metadata,
        "license": m.license,
        "compatibility": m.compatibility,
        "allowed_tools": m.allowed_tools,
        "applies_to": m.applies_to.as_ref().map(|s| s.iter().map(|s| s.as_str()).collect::<Vec<_>>()),
        "catalog": skill.catalog(),
        "source": skill.source_id(),
        "digest": skill.digest(),
        "files": skill.files().iter().map(|f| json!({
            "path": f.path,
            "size": f.size,
            "sha256": f.sha256,
            "readable": f.readable,
        })).collect::<Vec<_>>(),
    })
}

fn inspect(dir: &Path, as_json: bool) -> CommandResult {
    let target = open(dir)?;
    let scan = SkillRegistry::scan(vec![target.source]);
    print_errors(&scan.errors);
    if as_json {
        let out = json!({
            "skills": scan.skills.iter().map(skill_json).collect::<Vec<_>>(),
            "errors": scan.errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
        });
        outln!("{}", serde_json::to_string_pretty(&out).unwrap_or_default())?;
    } else {
        for skill in &scan.skills {
            let m = skill.manifest();
            outln!("{} {}", m.name, m.version().unwrap_or("(no version)"))?;
            outln!("  description:   {}", m.description)?;
            outln!("  source:        {}", skill.source_id())?;
            outln!("  digest:        {}", skill.digest())?;
            if let Some(tools) = &m.allowed_tools {
                outln!("  allowed-tools: {}", tools.join(" "))?;
            }
            let stages = m.applies_to.as_ref().map_or("plan act finalize (all)".to_owned(), |s| {
                s.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" ")
            });
            outln!("  applies-to:    {stages}")?;
            outln!("  files:")?;
            for f in skill.files() {
                let note = if f.readable {
                    "readable by the model"
                } else if f.path == "SKILL.md" {
                    "instructions"
                } else {
                    "digest only"
                };
                outln!("    {:<40} {:>8} B  {note}", f.path, f.size)?;
            }
        }
    }
    if scan.errors.is_empty() {
        Ok(())
    } else {
        Err(Failure::Invalid(format!(
            "{} found; run `modu skills validate {}` for details",
            plural(scan.errors.len(), "problem"),
            dir.display()
        )))
    }
}

fn lock(dir: &Path) -> CommandResult {
    let target = open(dir)?;
    let Some(catalog) = target.catalog_dir else {
        return Err(Failure::Usage(format!(
            "{} is a skill folder; lock its catalog folder (the parent) instead",
            dir.display()
        )));
    };
    let scan = SkillRegistry::scan(vec![target.source]);
    if !scan.errors.is_empty() {
        print_errors(&scan.errors);
        return Err(Failure::Invalid(format!(
            "{}; the lockfile was not written",
            plural(scan.errors.len(), "problem")
        )));
    }
    if scan.skills.is_empty() {
        return Err(Failure::Invalid(format!(
            "no skills found in {} (a skill is a folder holding SKILL.md)",
            dir.display()
        )));
    }
    let registry = SkillRegistry::from_skills(scan.skills);
    let path = catalog.join(LOCKFILE_NAME);
    registry
        .lockfile()
        .write(&path)
        .map_err(|e| Failure::Invalid(e.to_string()))?;
    outln!("wrote {} ({})", path.display(), plural(registry.len(), "skill"))?;
    Ok(())
}
