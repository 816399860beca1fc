//! Secrets in a stdio server's command-line arguments: the values of flags whose name ends
//! in a secret word (`--api-key=sk-...`, `--token VALUE`, `-e GITHUB_TOKEN=ghp_...`,
//! `--env=GITHUB_TOKEN=...`), `Authorization:` header values (`--header "Authorization: Bearer
//! ..."`), a URL's password and secret query values (`postgresql://user:pw@host/db`), also
//! inside one argument holding a command line (`sh -c "server --api-key sk-..."`).

/// The compact (lower-case, alphanumeric) secret words a flag name may end with: modu-core's
/// [`modu_core::mask::DEFAULT_SECRET_KEYS`] and what command lines also say.
fn secret_endings() -> Vec<String> {
    let extra = [
        "auth",
        "credential",
        "credentials",
        "passphrase",
        "pwd",
        "privatekey",
        "secretkey",
        "accesskey",
    ];
    modu_core::mask::DEFAULT_SECRET_KEYS
        .iter()
        .chain(extra.iter())
        .map(|k| compact(k))
        .collect()
}

fn compact(name: &str) -> String {
    name.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Whether a flag or variable name names a secret: its compact form ends with a secret word
/// (`--api-key`, `GITHUB_TOKEN`, `--client-secret`) or is `key`. Not `--token-limit`,
/// `--auth-type`, `--sort-key`, nor a negation such as `--no-auth`.
fn is_secret_name(endings: &[String], name: &str) -> bool {
    let name = name.trim_start_matches('-');
    let lower = name.to_ascii_lowercase();
    if lower.starts_with("no-") || lower.starts_with("no_") {
        return false;
    }
    let c = compact(name);
    !c.is_empty() && (c == "key" || endings.iter().any(|e| c.ends_with(e.as_str())))
}

/// What `Debug` shows in place of a secret argument value.
const REDACTED: &str = "<redacted>";

/// Secrets found in the arguments, and whether the next argument is a secret flag's value.
fn scan(endings: &[String], args: &[&str], out: &mut Vec<String>, depth: usize) {
    let mut value_next = false;
    for &arg in args {
        if std::mem::take(&mut value_next) && !arg.starts_with('-') && !arg.is_empty() {
            out.push(arg.to_owned());
            continue;
        }
        // `--header "Authorization: Bearer ..."`, `-H`, `--header=Authorization:...`.
        if let Some(at) = arg.to_ascii_lowercase().find("authorization:") {
            let value = arg[at + "authorization:".len()..].trim();
            if !value.is_empty() {
                out.push(value.to_owned());
                if let Some(token) = value.split_whitespace().nth(1) {
                    out.push(token.to_owned());
                }
            }
            continue;
        }
        // A command line in one argument (`sh -c "..."`): its words, once.
        if depth == 0 && arg.contains(char::is_whitespace) {
            let words: Vec<&str> = arg.split_whitespace().collect();
            scan(endings, &words, out, depth + 1);
            continue;
        }
        // `NAME=value`, also behind another `=` (`--env=GITHUB_TOKEN=ghp_...`).
        let mut rest = arg;
        let mut inline = false;
        while let Some((key, value)) = rest.split_once('=') {
            if is_secret_name(endings, key) {
                if !value.is_empty() {
                    out.push(value.to_owned());
                }
                inline = true;
                break;
            }
            rest = value;
        }
        if inline {
            continue;
        }
        if arg.contains("://") {
            out.extend(crate::config::url_secrets(Some(arg)));
            continue;
        }
        value_next = arg.starts_with('-') && is_secret_name(endings, arg);
    }
}

/// The arguments' secret values (see the module's documentation), for the redaction of
/// errors and logs.
pub(crate) fn arg_secrets(args: &[String]) -> Vec<String> {
    let endings = secret_endings();
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut out = Vec::new();
    scan(&endings, &words, &mut out, 0);
    out.sort();
    out.dedup();
    out
}

/// The secret values long enough (8 bytes or more) to be redacted from successful results too:
/// a short value (`--token 1`) would blank ordinary text the tools return.
pub(crate) fn arg_credentials(args: &[String]) -> Vec<String> {
    let mut out = arg_secrets(args);
    out.retain(|s| s.len() >= 8);
    out
}

/// The arguments with their secret values ([`arg_secrets`]) shown as `<redacted>`, for `Debug`.
pub(crate) fn redacted_args(args: &[String]) -> Vec<String> {
    let mut secrets = arg_secrets(args);
    // The longest first: a token inside a whole header value goes with it.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    args.iter()
        .map(|arg| {
            secrets
                .iter()
                .filter(|s| !s.is_empty())
                .fold(arg.clone(), |arg, secret| arg.replace(secret.as_str(), REDACTED))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn secret_flag_values_are_found_in_both_forms_and_ordinary_ones_kept() {
        let a = args(&[
            "server.py",
            "--api-key=sk-1",
            "--token",
            "tok-2",
            "-e",
            "GITHUB_TOKEN=ghp-3",
            "--key",
            "k-4",
            "--auth",
            "--verbose",
            "--port",
            "8080",
            "--name=work",
        ]);
        assert_eq!(arg_secrets(&a), ["ghp-3", "k-4", "sk-1", "tok-2"]);
        assert_eq!(
            redacted_args(&a),
            args(&[
                "server.py",
                "--api-key=<redacted>",
                "--token",
                "<redacted>",
                "-e",
                "GITHUB_TOKEN=<redacted>",
                "--key",
                "<redacted>",
                "--auth",
                "--verbose",
                "--port",
                "8080",
                "--name=work",
            ])
        );
    }

    #[test]
    fn headers_urls_nested_names_and_command_lines_are_found() {
        let a = args(&[
            "mcp-remote",
            "https://example.com/mcp",
            "--header",
            "Authorization: Bearer sk-header-1234",
            "-H",
            "authorization:Basic dXNlcjpwYXNz",
            "postgresql://user:pg-pass-5678@db/app",
            "--env=GITHUB_TOKEN=ghp_nested_0000",
            "sh",
            "-c",
            "server --api-key sk-shell-9999 --verbose",
        ]);
        let found = arg_secrets(&a);
        for secret in [
            "Bearer sk-header-1234",
            "sk-header-1234",
            "Basic dXNlcjpwYXNz",
            "pg-pass-5678",
            "ghp_nested_0000",
            "sk-shell-9999",
        ] {
            assert!(found.iter().any(|f| f == secret), "{secret} not in {found:?}");
        }
        let shown = redacted_args(&a).join(" ");
        for secret in [
            "sk-header-1234",
            "dXNlcjpwYXNz",
            "pg-pass-5678",
            "ghp_nested_0000",
            "sk-shell-9999",
        ] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(
            shown.contains("https://example.com/mcp") && shown.contains("--verbose"),
            "{shown}"
        );
    }

    #[test]
    fn ordinary_flags_that_merely_mention_a_secret_word_keep_their_values() {
        let a = args(&[
            "--token-limit",
            "4096",
            "--auth-type",
            "bearer",
            "--no-auth",
            "/srv/data",
            "--sort-key",
            "name",
        ]);
        assert!(arg_secrets(&a).is_empty(), "{:?}", arg_secrets(&a));
        assert_eq!(redacted_args(&a), a);
        // Short values are kept out of result redaction (they would blank ordinary text).
        let short = args(&["--token", "1234", "--api-key", "sk-long-enough"]);
        assert_eq!(arg_credentials(&short), ["sk-long-enough"]);
    }
}
