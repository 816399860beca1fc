//! Secrets in a stdio server's command-line arguments: the values of flags whose name looks
//! secret (`--api-key=sk-...`, `--token VALUE`, `-e GITHUB_TOKEN=ghp_...`).

use modu_core::mask::SecretMasker;

/// The flag names taken as secret besides [`modu_core::mask::DEFAULT_SECRET_KEYS`]: command
/// lines also say `--key`, `--auth`, `--credentials`, `--passphrase`, `--pwd`.
const EXTRA_SECRET_FLAGS: &[&str] = &["key", "auth", "credential", "credentials", "passphrase", "pwd"];

/// What `Debug` shows in place of a secret argument value.
const REDACTED: &str = "<redacted>";

fn masker() -> SecretMasker {
    SecretMasker::default().with_additional_keys(EXTRA_SECRET_FLAGS.iter().copied())
}

/// One argument: `Some(value)` when it is `NAME=value` (with or without leading dashes) under a
/// secret-looking name; whether it is a flag (`-x`, `--name`) with a secret-looking name and no
/// `=` (its value is the next argument).
fn classify(masker: &SecretMasker, arg: &str) -> (Option<usize>, bool) {
    let name = arg.trim_start_matches('-');
    if let Some((key, value)) = name.split_once('=') {
        let start = arg.len() - value.len();
        return ((!value.is_empty() && masker.is_secret_key(key)).then_some(start), false);
    }
    (None, arg.starts_with('-') && masker.is_secret_key(name))
}

/// The arguments' secret values (the `value` of `--flag=value` / `NAME=value`, and the argument
/// after a `--flag` of its own), each flag's name looking secret.
pub(crate) fn arg_secrets(args: &[String]) -> Vec<String> {
    let masker = masker();
    let mut out = Vec::new();
    let mut value_next = false;
    for arg in args {
        if std::mem::take(&mut value_next) && !arg.starts_with('-') && !arg.is_empty() {
            out.push(arg.clone());
            continue;
        }
        let (inline, flag) = classify(&masker, arg);
        if let Some(start) = inline {
            out.push(arg[start..].to_owned());
        }
        value_next = flag;
    }
    out
}

/// The arguments with their secret values ([`arg_secrets`]) shown as `<redacted>`, for `Debug`.
pub(crate) fn redacted_args(args: &[String]) -> Vec<String> {
    let masker = masker();
    let mut out = Vec::with_capacity(args.len());
    let mut value_next = false;
    for arg in args {
        if std::mem::take(&mut value_next) && !arg.starts_with('-') && !arg.is_empty() {
            out.push(REDACTED.to_owned());
            continue;
        }
        let (inline, flag) = classify(&masker, arg);
        out.push(match inline {
            Some(start) => format!("{}{REDACTED}", &arg[..start]),
            None => arg.clone(),
        });
        value_next = flag;
    }
    out
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
        assert_eq!(arg_secrets(&a), ["sk-1", "tok-2", "ghp-3", "k-4"]);
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
}
