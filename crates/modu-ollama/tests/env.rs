//! `OllamaClient::builder_from_env` reads `OLLAMA_HOST` as the Ollama CLI does
//! (`envconfig.Host`): a URL as given; otherwise `host[:port][/path]` over http, on port 11434
//! when none is given (`OLLAMA_HOST=0.0.0.0`, the setting Ollama's FAQ gives for serving on
//! every interface, is `http://0.0.0.0:11434`, not port 80).
//!
//! The test re-runs itself in a child process per value (the workspace forbids `unsafe`, so
//! `std::env::set_var` is out).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use modu_ollama::OllamaClient;

const CHILD: &str = "MODU_OLLAMA_ENV_TEST_CHILD";

#[test]
fn ollama_host_is_read_as_the_ollama_cli_reads_it() {
    if let Ok(expected) = std::env::var(CHILD) {
        let client = OllamaClient::builder_from_env().model("llama3.2").build().unwrap();
        assert_eq!(client.base_url(), expected);
        return;
    }
    for (host, expected) in [
        ("0.0.0.0", "http://0.0.0.0:11434"),
        ("myhost", "http://myhost:11434"),
        ("  gpu-box  ", "http://gpu-box:11434"),
        ("myhost:8080", "http://myhost:8080"),
        ("127.0.0.1:11434", "http://127.0.0.1:11434"),
        ("[::1]", "http://[::1]:11434"),
        ("[::1]:9000", "http://[::1]:9000"),
        ("::1", "http://[::1]:11434"),
        (":11500", "http://127.0.0.1:11500"),
        // An empty or invalid port is the default one.
        ("gpu-box:", "http://gpu-box:11434"),
        ("gpu-box:http", "http://gpu-box:11434"),
        ("myhost/prefix", "http://myhost:11434/prefix"),
        ("ollama.com", "https://ollama.com:443"),
        // A URL is taken as it is: its scheme's own default port.
        ("http://myhost", "http://myhost"),
        ("https://ollama.example.com/", "https://ollama.example.com"),
        ("", "http://127.0.0.1:11434"),
    ] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "ollama_host_is_read_as_the_ollama_cli_reads_it",
                "--exact",
                "--test-threads=1",
            ])
            .env(CHILD, expected)
            .env("OLLAMA_HOST", host)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "OLLAMA_HOST={host:?}:\n{text}");
        assert!(
            text.contains("1 passed"),
            "OLLAMA_HOST={host:?}: the child did not run:\n{text}"
        );
    }
}
