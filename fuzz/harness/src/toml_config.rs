//! `modu_toml`: modu-cli's `modu.toml` loader (`config::load`), compiled into this crate from
//! the binary crate's source (modu-cli has no library target; config.rs only needs modu-mcp,
//! toml, serde and serde_path_to_error).

use std::io::Write;
use std::path::PathBuf;
use std::sync::OnceLock;

#[allow(dead_code, clippy::all)]
#[path = "../../../crates/modu-cli/src/config.rs"]
mod config;

/// The separator between the file text and the environment variables in an input.
pub const ENV_MARKER: &[u8] = b"\n#--env--\n";

fn scratch() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| std::env::temp_dir().join(format!("modu-fuzz-{}-modu.toml", std::process::id())))
}

/// The input is the file's bytes, optionally followed by [`ENV_MARKER`] and `NAME=VALUE` lines
/// (the `MODU_<TABLE>__<KEY>` overrides).
///
/// Properties: no panic; an error is one line that does not start with `error: ` (what the
/// loader promises its callers).
pub fn modu_toml(data: &[u8]) {
    let (file, env) = match data.windows(ENV_MARKER.len()).position(|w| w == ENV_MARKER) {
        Some(at) => (&data[..at], &data[at + ENV_MARKER.len()..]),
        None => (data, &[][..]),
    };
    let env: Vec<(String, String)> = String::from_utf8_lossy(env)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let path = scratch();
    {
        let mut out = std::fs::File::create(path).expect("the scratch file can be written");
        out.write_all(file).expect("the scratch file can be written");
    }
    match config::load(Some(path), &env) {
        Ok(loaded) => {
            assert_eq!(loaded.file.as_deref(), Some(path.as_path()));
        }
        Err(message) => {
            assert!(!message.contains('\n'), "a multi-line error: {message:?}");
            assert!(!message.starts_with("error: "), "{message:?}");
        }
    }
}
