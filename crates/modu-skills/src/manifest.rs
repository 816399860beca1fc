//! `SKILL.md`: YAML front matter and a Markdown body, and the rules it must follow.

use std::collections::BTreeMap;

use modu_core::context_provider::Stage;
use serde_json::Value;

use crate::error::{SkillError, ValidationRule};

/// The longest `name`, in characters.
pub const MAX_NAME_LEN: usize = 64;
/// The longest `description`, in characters.
pub const MAX_DESCRIPTION_LEN: usize = 1024;
/// The longest `compatibility`, in characters.
pub const MAX_COMPATIBILITY_LEN: usize = 500;

/// The top-level front matter keys a `SKILL.md` may have. Any other key is rejected
/// ([`ValidationRule::UnknownKey`]): the Agent Skills format defines a closed set of fields
/// (with `metadata` as the place for anything else), and a misspelt key such as
/// `allowed_tools` or `applies_to` would otherwise silently drop a restriction.
pub const KNOWN_KEYS: &[&str] = &[
    "name",
    "description",
    "license",
    "compatibility",
    "metadata",
    "allowed-tools",
    "applies-to",
];

/// A parsed and validated `SKILL.md`.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SkillManifest {
    /// The skill's name (equal to its folder's name).
    pub name: String,
    /// What the skill does and when to use it (what automatic selection sees).
    pub description: String,
    /// `metadata`: free string pairs (`version`, `author`, …).
    pub metadata: BTreeMap<String, String>,
    /// `allowed-tools`: the tools the skill expects to use; `None` when not declared.
    pub allowed_tools: Option<Vec<String>>,
    /// `applies-to`: the stages whose requests get the skill's instructions; `None` = all.
    pub applies_to: Option<Vec<Stage>>,
    /// `license`.
    pub license: Option<String>,
    /// `compatibility`: environment requirements, for people.
    pub compatibility: Option<String>,
    /// The Markdown body: the instructions.
    pub body: String,
}

impl SkillManifest {
    /// `metadata.version`, if set.
    pub fn version(&self) -> Option<&str> {
        self.metadata.get("version").map(String::as_str)
    }

    /// Whether the skill's instructions apply to requests of this stage.
    pub fn applies_to_stage(&self, stage: Stage) -> bool {
        self.applies_to.as_ref().is_none_or(|stages| stages.contains(&stage))
    }

    /// Parses `SKILL.md` text, returning the first rule broken.
    ///
    /// `file` names the file in errors; `folder` is the skill folder's name, which `name` must
    /// equal (pass `None` to skip that rule).
    ///
    /// ```
    /// use modu_skills::SkillManifest;
    /// let text = "---\nname: demo\ndescription: Shows the format.\n---\n# Demo\nDo it well.\n";
    /// let manifest = SkillManifest::parse("demo/SKILL.md", Some("demo"), text).unwrap();
    /// assert_eq!(manifest.name, "demo");
    /// assert_eq!(manifest.body.trim(), "# Demo\nDo it well.");
    /// let err = SkillManifest::parse("x/SKILL.md", Some("x"), "---\nname: Bad_Name\n---\n").unwrap_err();
    /// assert_eq!(err.rule(), Some(modu_skills::ValidationRule::NameCharacters));
    /// ```
    pub fn parse(file: &str, folder: Option<&str>, text: &str) -> Result<SkillManifest, SkillError> {
        Self::parse_all(file, folder, text).map_err(|mut errors| errors.remove(0))
    }

    /// Parses `SKILL.md` text, returning every rule broken (never an empty list on error).
    pub fn parse_all(file: &str, folder: Option<&str>, text: &str) -> Result<SkillManifest, Vec<SkillError>> {
        let mut errors = Vec::new();
        let err = |line: Option<usize>, rule: ValidationRule, message: String| {
            SkillError::validation(file, line, rule, message)
        };
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        if lines.first().map(|l| l.trim_end()) != Some("---") {
            return Err(vec![err(
                Some(1),
                ValidationRule::MissingFrontMatter,
                "SKILL.md must start with a '---' line, then YAML front matter (name, description), then '---'".into(),
            )]);
        }
        let Some(close) = lines.iter().skip(1).position(|l| l.trim_end() == "---").map(|i| i + 1) else {
            return Err(vec![err(
                Some(1),
                ValidationRule::UnterminatedFrontMatter,
                "the front matter opened on line 1 has no closing '---' line".into(),
            )]);
        };
        let yaml: String = lines[1..close].concat();
        let body: String = lines[close + 1..].concat();
        // YAML line n is file line n + 1.
        let to_file_line = |l: u64| -> Option<usize> { (l > 0).then(|| l as usize + 1) };

        let map: BTreeMap<String, serde_saphyr::Spanned<Value>> = if yaml.trim().is_empty() {
            BTreeMap::new()
        } else {
            match serde_saphyr::from_str(&yaml) {
                Ok(map) => map,
                Err(e) => {
                    let location = e.location();
                    let line = location.as_ref().and_then(|l| to_file_line(l.line()));
                    let message = yaml_message(&e);
                    // The YAML library's own "at line N" counts front-matter lines; the error
                    // carries the file line, and the column is the same in both.
                    let column = location
                        .filter(|l| l.column() > 0)
                        .map(|l| format!(" (column {})", l.column()))
                        .unwrap_or_default();
                    return Err(vec![err(
                        line,
                        ValidationRule::InvalidYaml,
                        format!("the front matter is not a valid YAML mapping: {message}{column}"),
                    )]);
                }
            }
        };
        let key_line = |key: &str| -> Option<usize> {
            // The key's own line: the first top-level line starting with `key:`.
            lines[1..close]
                .iter()
                .position(|l| {
                    l.strip_prefix(key)
                        .is_some_and(|rest| rest.trim_start().starts_with(':'))
                })
                .map(|i| i + 2)
                .or_else(|| map.get(key).and_then(|v| to_file_line(v.referenced.line())))
        };

        for key in map.keys() {
            if !KNOWN_KEYS.contains(&key.as_str()) {
                let hint = match key.as_str() {
                    "allowed_tools" | "allowedTools" | "tools" => " (did you mean 'allowed-tools'?)",
                    "applies_to" | "appliesTo" | "stages" => " (did you mean 'applies-to'?)",
                    "version" => " (put it under 'metadata:' as 'version')",
                    _ => "",
                };
                errors.push(err(
                    key_line(key),
                    ValidationRule::UnknownKey,
                    format!(
                        "unknown key {key:?}{hint}; allowed keys are {}; put other data under 'metadata'",
                        KNOWN_KEYS.join(", ")
                    ),
                ));
            }
        }

        let string_field = |key: &str, errors: &mut Vec<SkillError>| -> Option<String> {
            match map.get(key).map(|v| &v.value) {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(other) => {
                    errors.push(err(
                        key_line(key),
                        ValidationRule::FieldType,
                        format!("{key} must be a string, found {}", kind(other)),
                    ));
                    None
                }
            }
        };

        // name
        let name = string_field("name", &mut errors).unwrap_or_default();
        let name_line = key_line("name");
        if name.trim().is_empty() {
            if !map
                .get("name")
                .is_some_and(|v| !v.value.is_string() && !v.value.is_null())
            {
                errors.push(err(
                    name_line.or(Some(2)),
                    ValidationRule::NameMissing,
                    "'name' is required: lowercase letters, digits and hyphens, equal to the folder name".into(),
                ));
            }
        } else {
            errors.extend(
                check_name(&name)
                    .into_iter()
                    .map(|(rule, message)| err(name_line, rule, message)),
            );
            if let Some(folder) = folder
                && folder != name
            {
                errors.push(err(
                    name_line,
                    ValidationRule::NameFolderMismatch,
                    format!("name {name:?} must equal its folder's name {folder:?}: rename one of them"),
                ));
            }
        }

        // description
        let description = string_field("description", &mut errors).unwrap_or_default();
        if description.trim().is_empty() {
            if !map
                .get("description")
                .is_some_and(|v| !v.value.is_string() && !v.value.is_null())
            {
                errors.push(err(
                    key_line("description").or(Some(2)),
                    ValidationRule::DescriptionMissing,
                    "'description' is required: say what the skill does and when to use it".into(),
                ));
            }
        } else if description.chars().count() > MAX_DESCRIPTION_LEN {
            errors.push(err(
                key_line("description"),
                ValidationRule::DescriptionTooLong,
                format!(
                    "description has {} characters; the limit is {MAX_DESCRIPTION_LEN}",
                    description.chars().count()
                ),
            ));
        }

        let license = string_field("license", &mut errors);
        let compatibility = string_field("compatibility", &mut errors);
        if let Some(c) = &compatibility {
            let n = c.chars().count();
            if c.trim().is_empty() || n > MAX_COMPATIBILITY_LEN {
                errors.push(err(
                    key_line("compatibility"),
                    ValidationRule::CompatibilityLength,
                    format!("compatibility must have 1 to {MAX_COMPATIBILITY_LEN} characters, it has {n}"),
                ));
            }
        }

        // metadata
        let mut metadata = BTreeMap::new();
        match map.get("metadata").map(|v| &v.value) {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                for (k, v) in m {
                    match v {
                        Value::String(s) => {
                            metadata.insert(k.clone(), s.clone());
                        }
                        Value::Number(n) => {
                            metadata.insert(k.clone(), n.to_string());
                        }
                        Value::Bool(b) => {
                            metadata.insert(k.clone(), b.to_string());
                        }
                        other => errors.push(err(
                            key_line("metadata"),
                            ValidationRule::FieldType,
                            format!("metadata.{k} must be a string, found {}", kind(other)),
                        )),
                    }
                }
            }
            Some(other) => errors.push(err(
                key_line("metadata"),
                ValidationRule::FieldType,
                format!("metadata must be a mapping of strings, found {}", kind(other)),
            )),
        }

        // allowed-tools: a space-separated string (the format), or a list of names.
        let allowed_tools = match map.get("allowed-tools").map(|v| &v.value) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.split_whitespace().map(str::to_owned).collect::<Vec<_>>()),
            Some(Value::Array(items)) if items.iter().all(Value::is_string) => Some(
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect::<Vec<_>>(),
            ),
            Some(other) => {
                errors.push(err(
                    key_line("allowed-tools"),
                    ValidationRule::FieldType,
                    format!(
                        "allowed-tools must be a space-separated string of tool names, found {}",
                        kind(other)
                    ),
                ));
                None
            }
        };
        if let Some(tools) = &allowed_tools {
            for tool in tools {
                if !tool
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
                {
                    errors.push(err(
                        key_line("allowed-tools"),
                        ValidationRule::AllowedToolsSyntax,
                        format!(
                            "allowed-tools entry {tool:?} is not a tool name (letters, digits, '_', '-', '.'); \
                             list the names of registered tools, separated by spaces"
                        ),
                    ));
                }
            }
        }

        // applies-to: a list of stages (or one stage as a string); omitted (or null, like the
        // other fields) = all.
        let applies_to = match map.get("applies-to").filter(|v| !v.value.is_null()) {
            None => None,
            Some(spanned) => {
                let items: Option<Vec<&Value>> = match &spanned.value {
                    Value::String(_) => Some(vec![&spanned.value]),
                    Value::Array(items) => Some(items.iter().collect()),
                    _ => None,
                };
                match items {
                    None => {
                        errors.push(err(
                            key_line("applies-to"),
                            ValidationRule::FieldType,
                            format!(
                                "applies-to must be a list of stages (plan, act, finalize), found {}",
                                kind(&spanned.value)
                            ),
                        ));
                        None
                    }
                    Some(items) if items.is_empty() => {
                        errors.push(err(
                            key_line("applies-to"),
                            ValidationRule::UnknownStage,
                            "applies-to is empty; list stages (plan, act, finalize) or omit it for all".into(),
                        ));
                        None
                    }
                    Some(items) => {
                        let mut stages = Vec::new();
                        let start = key_line("applies-to").unwrap_or(2);
                        for item in items {
                            let text = item.as_str().unwrap_or_default();
                            match parse_stage(text) {
                                Some(stage) => {
                                    if !stages.contains(&stage) {
                                        stages.push(stage);
                                    }
                                }
                                None => {
                                    let shown = if item.is_string() {
                                        text.to_owned()
                                    } else {
                                        item.to_string()
                                    };
                                    // The line holding the bad entry, at or after the key.
                                    let line = lines[1..close]
                                        .iter()
                                        .enumerate()
                                        .skip(start.saturating_sub(2))
                                        .find(|(_, l)| !shown.is_empty() && l.contains(shown.as_str()))
                                        .map(|(i, _)| i + 2)
                                        .or(Some(start));
                                    errors.push(err(
                                        line,
                                        ValidationRule::UnknownStage,
                                        format!("unknown stage {shown:?} in applies-to; use plan, act or finalize"),
                                    ));
                                }
                            }
                        }
                        Some(stages)
                    }
                }
            }
        };

        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(SkillManifest {
            name,
            description,
            metadata,
            allowed_tools,
            applies_to,
            license,
            compatibility,
            body,
        })
    }
}

/// Checks a skill name against the naming rules, returning every rule broken.
pub fn check_name(name: &str) -> Vec<(ValidationRule, String)> {
    let mut out = Vec::new();
    if name.is_empty() {
        out.push((ValidationRule::NameMissing, "the name is empty".into()));
        return out;
    }
    let n = name.chars().count();
    if n > MAX_NAME_LEN {
        out.push((
            ValidationRule::NameTooLong,
            format!("name has {n} characters; the limit is {MAX_NAME_LEN}"),
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        out.push((
            ValidationRule::NameCharacters,
            format!("name {name:?} has {bad:?}; use only lowercase letters a-z, digits and '-'"),
        ));
    }
    if name.starts_with('-') || name.ends_with('-') || name.contains("--") {
        out.push((
            ValidationRule::NameHyphens,
            format!("name {name:?} must not start or end with '-' or contain '--'"),
        ));
    }
    out
}

fn parse_stage(s: &str) -> Option<Stage> {
    match s {
        "plan" => Some(Stage::Plan),
        "act" => Some(Stage::Act),
        "finalize" => Some(Stage::Finalize),
        _ => None,
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// What is wrong with the front matter, in the YAML library's words for users, without its
/// location (which counts front-matter lines, not file lines) and without its hints to
/// programmers (a duplicate key is just that).
fn yaml_message(e: &serde_saphyr::Error) -> String {
    use serde_saphyr::MessageFormatter;
    let e = e.without_snippet();
    if let serde_saphyr::Error::DuplicateMappingKey { key, .. } = e {
        return match key {
            Some(key) => format!("duplicate key {key:?}; each key may appear once"),
            None => "duplicate key; each key may appear once".to_owned(),
        };
    }
    first_line(&serde_saphyr::UserMessageFormatter.format_message(e))
}

fn first_line(s: &str) -> String {
    s.lines().find(|l| !l.trim().is_empty()).unwrap_or(s).trim().to_owned()
}
