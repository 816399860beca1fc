//! [`InMemorySkillSource`]: skills held in memory.

use std::collections::BTreeMap;

use super::{SkillSource, check_relative_path, check_skill_component};
use crate::error::SkillError;

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
