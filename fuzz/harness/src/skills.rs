//! `skill_front_matter`: `SKILL.md` text through `SkillManifest::parse_all` / `parse`.

use modu_skills::SkillManifest;

/// Properties: no panic; `parse` fails exactly when `parse_all` does, with its first error;
/// `parse_all` never fails with an empty list; an accepted manifest's name is its folder's
/// name when a folder is given, and its name and description are not blank.
pub fn skill_front_matter(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let free = SkillManifest::parse_all("fuzz/SKILL.md", None, text);
    let folder = match &free {
        Ok(m) => m.name.clone(),
        Err(_) => "demo".to_owned(),
    };
    let all = SkillManifest::parse_all("fuzz/SKILL.md", Some(&folder), text);
    let first = SkillManifest::parse("fuzz/SKILL.md", Some(&folder), text);
    match (&all, &first) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a, b);
            assert_eq!(a.name, folder);
            assert!(!a.name.trim().is_empty() && !a.description.trim().is_empty());
        }
        (Err(errors), Err(e)) => {
            assert!(!errors.is_empty(), "parse_all failed with no error");
            assert_eq!(errors[0].to_string(), e.to_string());
        }
        _ => panic!("parse and parse_all disagree: {all:?} vs {first:?}"),
    }
    if let (Ok(free), Ok(named)) = (&free, &all) {
        assert_eq!(free, named, "the folder check changed an accepted manifest");
    }
}
