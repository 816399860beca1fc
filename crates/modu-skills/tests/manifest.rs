//! Every SKILL.md validation rule, each with the file, line and rule it reports.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use modu_core::context_provider::Stage;
use modu_skills::{SkillError, SkillManifest, ValidationRule};

const FILE: &str = "skills/demo/SKILL.md";

fn parse(text: &str) -> Result<SkillManifest, Vec<SkillError>> {
    SkillManifest::parse_all(FILE, Some("demo"), text)
}

/// The (rule, line) pairs of a failed parse.
fn rules(text: &str) -> Vec<(ValidationRule, Option<usize>)> {
    match parse(text) {
        Ok(m) => panic!("expected errors, parsed {m:?}"),
        Err(errors) => errors
            .iter()
            .map(|e| match e {
                SkillError::Validation { file, line, rule, .. } => {
                    assert_eq!(file, FILE);
                    (*rule, *line)
                }
                other => panic!("not a validation error: {other:?}"),
            })
            .collect(),
    }
}

fn only(text: &str) -> (ValidationRule, Option<usize>) {
    let r = rules(text);
    assert_eq!(r.len(), 1, "expected one error, got {r:?}");
    r[0]
}

#[test]
fn full_manifest_parses() {
    let text = "---\nname: demo\ndescription: Reviews things. Use it for reviews.\nlicense: MIT\ncompatibility: needs network\nmetadata:\n  version: \"1.2.0\"\n  author: ops\n  rev: 3\nallowed-tools: lookup_invoice lookup_vendor\napplies-to:\n  - plan\n  - act\n---\n# Demo\n\nStep one.\n";
    let m = parse(text).unwrap();
    assert_eq!(m.name, "demo");
    assert_eq!(m.version(), Some("1.2.0"));
    assert_eq!(m.metadata.get("rev").map(String::as_str), Some("3"));
    assert_eq!(m.license.as_deref(), Some("MIT"));
    assert_eq!(m.compatibility.as_deref(), Some("needs network"));
    assert_eq!(
        m.allowed_tools.as_deref(),
        Some(&["lookup_invoice".to_owned(), "lookup_vendor".to_owned()][..])
    );
    assert_eq!(m.applies_to, Some(vec![Stage::Plan, Stage::Act]));
    assert!(m.applies_to_stage(Stage::Act));
    assert!(!m.applies_to_stage(Stage::Finalize));
    assert_eq!(m.body, "# Demo\n\nStep one.\n");
}

#[test]
fn omitted_applies_to_means_every_stage_and_list_allowed_tools_accepted() {
    let m = parse("---\nname: demo\ndescription: d\nallowed-tools: [a, b.c]\n---\n").unwrap();
    assert_eq!(m.applies_to, None);
    for stage in [Stage::Plan, Stage::Act, Stage::Finalize] {
        assert!(m.applies_to_stage(stage));
    }
    assert_eq!(m.allowed_tools.unwrap(), ["a", "b.c"]);
    let single = parse("---\nname: demo\ndescription: d\napplies-to: finalize\n---\n").unwrap();
    assert_eq!(single.applies_to, Some(vec![Stage::Finalize]));
}

#[test]
fn missing_front_matter() {
    assert_eq!(only("# Just markdown\n"), (ValidationRule::MissingFrontMatter, Some(1)));
}

#[test]
fn unterminated_front_matter() {
    assert_eq!(
        only("---\nname: demo\ndescription: d\n# body\n"),
        (ValidationRule::UnterminatedFrontMatter, Some(1))
    );
}

#[test]
fn invalid_yaml_reports_its_line() {
    let (rule, line) = only("---\nname: demo\ndescription: [unclosed\n---\n");
    assert_eq!(rule, ValidationRule::InvalidYaml);
    assert!(line.is_some_and(|l| l >= 3), "line {line:?}");
    // A list instead of a mapping.
    assert_eq!(only("---\n- a\n- b\n---\n").0, ValidationRule::InvalidYaml);
}

#[test]
fn a_yaml_error_names_file_lines_only_and_a_duplicate_key_plainly() {
    // `name` again on file line 4 (front-matter line 3).
    let text = "---\nname: demo\ndescription: d\nname: other\n---\n";
    let errors = parse(text).unwrap_err();
    let [
        SkillError::Validation {
            line, rule, message, ..
        },
    ] = errors.as_slice()
    else {
        panic!("{errors:?}")
    };
    assert_eq!((*rule, *line), (ValidationRule::InvalidYaml, Some(4)));
    assert!(
        message.starts_with("the front matter is not a valid YAML mapping: duplicate key \"name\""),
        "{message}"
    );
    assert!(!message.contains("line 3"), "a front-matter line number: {message}");
    assert!(!message.contains("DuplicateKeyPolicy"), "the library's hint: {message}");
    assert_eq!(errors[0].to_string().split(": ").next(), Some("skills/demo/SKILL.md:4"));
    // A syntax error: its file line, and no other line number in the message.
    let errors = parse("---\nname: demo\ndescription: d\nlicense: [MIT\n---\n").unwrap_err();
    let [SkillError::Validation { line, message, .. }] = errors.as_slice() else {
        panic!("{errors:?}")
    };
    let line = line.unwrap_or_else(|| panic!("no line: {message}"));
    assert!(line >= 4, "{line}: {message}");
    assert!(!message.contains("line "), "{message}");
}

#[test]
fn null_applies_to_is_absent_like_the_other_fields() {
    let m = parse("---\nname: demo\ndescription: d\napplies-to:\nallowed-tools: null\n---\n").unwrap();
    assert_eq!(m.applies_to, None);
    assert!(m.applies_to_stage(Stage::Finalize));
    assert_eq!(m.allowed_tools, None);
}

#[test]
fn unknown_key_is_rejected_with_its_line_and_a_hint() {
    let errors = parse("---\nname: demo\ndescription: d\nallowed_tools: a b\n---\n").unwrap_err();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].rule(), Some(ValidationRule::UnknownKey));
    let msg = errors[0].to_string();
    assert!(msg.starts_with("skills/demo/SKILL.md:4: unknown_key:"), "{msg}");
    assert!(msg.contains("did you mean 'allowed-tools'"), "{msg}");
}

#[test]
fn name_missing() {
    assert_eq!(only("---\ndescription: d\n---\n").0, ValidationRule::NameMissing);
    assert_eq!(
        only("---\nname: \"\"\ndescription: d\n---\n"),
        (ValidationRule::NameMissing, Some(2))
    );
}

#[test]
fn name_wrong_type() {
    assert_eq!(
        only("---\nname: [demo]\ndescription: d\n---\n"),
        (ValidationRule::FieldType, Some(2))
    );
}

#[test]
fn name_too_long() {
    let long = "a".repeat(65);
    let text = format!("---\nname: {long}\ndescription: d\n---\n");
    let errors = SkillManifest::parse_all(FILE, None, &text).unwrap_err();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].rule(), Some(ValidationRule::NameTooLong));
    // 64 is fine.
    let ok = format!("---\nname: {}\ndescription: d\n---\n", "a".repeat(64));
    assert!(SkillManifest::parse_all(FILE, None, &ok).is_ok());
}

#[test]
fn name_characters() {
    for bad in ["Demo", "de_mo", "dé", "de mo", "de.mo"] {
        let text = format!("---\nname: \"{bad}\"\ndescription: d\n---\n");
        let errors = SkillManifest::parse_all(FILE, None, &text).unwrap_err();
        assert_eq!(errors[0].rule(), Some(ValidationRule::NameCharacters), "{bad}");
        assert!(errors[0].to_string().contains(":2:"), "{}", errors[0]);
    }
}

#[test]
fn name_hyphens() {
    for bad in ["-demo", "demo-", "de--mo"] {
        let text = format!("---\nname: \"{bad}\"\ndescription: d\n---\n");
        let errors = SkillManifest::parse_all(FILE, None, &text).unwrap_err();
        assert_eq!(errors.len(), 1, "{bad}: {errors:?}");
        assert_eq!(errors[0].rule(), Some(ValidationRule::NameHyphens), "{bad}");
    }
}

#[test]
fn name_must_match_folder() {
    assert_eq!(
        only("---\nname: other\ndescription: d\n---\n"),
        (ValidationRule::NameFolderMismatch, Some(2))
    );
}

#[test]
fn description_missing_and_too_long() {
    assert_eq!(only("---\nname: demo\n---\n").0, ValidationRule::DescriptionMissing);
    assert_eq!(
        only("---\nname: demo\ndescription: \"  \"\n---\n"),
        (ValidationRule::DescriptionMissing, Some(3))
    );
    let long = "x".repeat(1025);
    assert_eq!(
        only(&format!("---\nname: demo\ndescription: {long}\n---\n")),
        (ValidationRule::DescriptionTooLong, Some(3))
    );
    assert!(parse(&format!("---\nname: demo\ndescription: {}\n---\n", "x".repeat(1024))).is_ok());
}

#[test]
fn compatibility_length() {
    let long = "x".repeat(501);
    assert_eq!(
        only(&format!(
            "---\nname: demo\ndescription: d\ncompatibility: {long}\n---\n"
        )),
        (ValidationRule::CompatibilityLength, Some(4))
    );
}

#[test]
fn unknown_stage_points_at_its_line() {
    assert_eq!(
        only("---\nname: demo\ndescription: d\napplies-to:\n  - act\n  - review\n---\n"),
        (ValidationRule::UnknownStage, Some(6))
    );
    assert_eq!(
        only("---\nname: demo\ndescription: d\napplies-to: []\n---\n").0,
        ValidationRule::UnknownStage
    );
    assert_eq!(
        only("---\nname: demo\ndescription: d\napplies-to: {act: 1}\n---\n").0,
        ValidationRule::FieldType
    );
}

#[test]
fn allowed_tools_syntax_and_type() {
    assert_eq!(
        only("---\nname: demo\ndescription: d\nallowed-tools: Bash(git:*) read\n---\n"),
        (ValidationRule::AllowedToolsSyntax, Some(4))
    );
    assert_eq!(
        only("---\nname: demo\ndescription: d\nallowed-tools: 3\n---\n"),
        (ValidationRule::FieldType, Some(4))
    );
}

#[test]
fn metadata_must_hold_strings() {
    assert_eq!(
        only("---\nname: demo\ndescription: d\nmetadata:\n  nested:\n    a: b\n---\n"),
        (ValidationRule::FieldType, Some(4))
    );
    assert_eq!(
        only("---\nname: demo\ndescription: d\nmetadata: [a]\n---\n"),
        (ValidationRule::FieldType, Some(4))
    );
}

#[test]
fn every_error_is_reported_at_once() {
    let r = rules("---\nname: Bad--\nfoo: 1\n---\n");
    let ids: Vec<ValidationRule> = r.iter().map(|(rule, _)| *rule).collect();
    assert!(ids.contains(&ValidationRule::UnknownKey));
    assert!(ids.contains(&ValidationRule::NameCharacters));
    assert!(ids.contains(&ValidationRule::NameHyphens));
    assert!(ids.contains(&ValidationRule::NameFolderMismatch));
    assert!(ids.contains(&ValidationRule::DescriptionMissing));
}
