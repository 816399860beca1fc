//! Rule `budget`: no `.rs` file over [`MAX_LINES`] lines, unless [`ALLOW`] names it with a
//! reason; an entry for a file that is now within budget (or gone) is itself a violation, so
//! the list only shrinks.

use super::Violation;

pub const MAX_LINES: usize = 600;

/// Where the budget applies.
pub const DIRS: &[&str] = &["crates", "xtask", "examples", "tests"];

/// Files over budget, each with why (path, reason); empty since every file was split. A new
/// entry needs a reason a reviewer accepts; remove it when its file is split.
pub const ALLOW: &[(&str, &str)] = &[];

/// `sizes`: (line count, path) of every file the budget applies to.
pub fn check(sizes: &[(usize, String)], allow: &[(&str, &str)]) -> Vec<Violation> {
    let mut out = Vec::new();
    for (lines, path) in sizes {
        if *lines > MAX_LINES && !allow.iter().any(|(p, _)| p == path) {
            out.push(Violation::new(
                "budget",
                path.clone(),
                *lines,
                format!("{lines} lines, over the budget of {MAX_LINES}: split the file (or allow-list it with a reason in xtask/src/tidy/budget.rs)"),
            ));
        }
    }
    for (path, reason) in allow {
        if reason.trim().is_empty() {
            out.push(Violation::new("budget", *path, 0, "allow-list entry without a reason"));
        }
        match sizes.iter().find(|(_, p)| p == path) {
            None => out.push(Violation::new(
                "budget",
                *path,
                0,
                "stale allow-list entry: the file is gone; remove it from xtask/src/tidy/budget.rs",
            )),
            Some((lines, _)) if *lines <= MAX_LINES => out.push(Violation::new(
                "budget",
                *path,
                0,
                format!(
                    "stale allow-list entry: the file has {lines} lines now; remove it from xtask/src/tidy/budget.rs"
                ),
            )),
            Some(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(list: &[(usize, &str)]) -> Vec<(usize, String)> {
        list.iter().map(|(n, p)| (*n, (*p).to_owned())).collect()
    }

    #[test]
    fn a_file_over_budget_is_found() {
        let found = check(
            &sizes(&[(601, "crates/a/src/big.rs"), (600, "crates/a/src/ok.rs")]),
            &[],
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].path, "crates/a/src/big.rs");
        assert_eq!(found[0].rule, "budget");
    }

    #[test]
    fn allow_listed_and_small_files_pass() {
        let allow = [("crates/a/src/big.rs", "split pending")];
        assert!(
            check(
                &sizes(&[(900, "crates/a/src/big.rs"), (10, "crates/a/src/lib.rs")]),
                &allow
            )
            .is_empty()
        );
    }

    #[test]
    fn stale_and_reasonless_entries_are_found() {
        let allow = [
            ("crates/a/src/was_big.rs", "split pending"),
            ("crates/a/src/gone.rs", "x"),
            ("crates/a/src/big.rs", " "),
        ];
        let found = check(
            &sizes(&[(300, "crates/a/src/was_big.rs"), (700, "crates/a/src/big.rs")]),
            &allow,
        );
        let paths: Vec<&str> = found.iter().map(|v| v.path.as_str()).collect();
        assert_eq!(
            paths,
            ["crates/a/src/was_big.rs", "crates/a/src/gone.rs", "crates/a/src/big.rs"],
            "{found:?}"
        );
    }
}
