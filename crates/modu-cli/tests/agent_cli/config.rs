//! Configuration: bad configs, `--help`, Ollama detection and settings from `modu.toml`.

use modu_testing::MockOpenAiServer;
use serde_json::json;

use crate::support::{modu, output, text, transcript};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_configs_fail_with_one_exact_line() {
    let dir = tempfile::tempdir().unwrap();
    let url = "http://127.0.0.1:9/v1";
    let cases: [(&str, Option<&str>, &[&str], &str); 6] = [
        (
            "modu.toml",
            Some("[model]\nmodel = \"m\"\nfoo = 1\n"),
            &["run", "hi"],
            "error: modu.toml: unknown key `foo` in [model]\n",
        ),
        (
            "modu.toml",
            Some("[agent]\ninstructions = \"unterminated\n"),
            &["run", "hi"],
            "error: modu.toml: invalid TOML at line 2, column 29: invalid basic string, expected `\"`\n",
        ),
        (
            "other.toml",
            None,
            &["--config", "missing.toml", "run", "hi"],
            "error: missing.toml: cannot read the config file: No such file or directory (os error 2)\n",
        ),
        (
            "modu.toml",
            Some("[stores]\nkind = \"memory\"\n"),
            &["sessions", "list"],
            "error: modu.toml: unknown table `stores` (expected one of agent, model, store, memory, limits, mcp, skills, output)\n",
        ),
        (
            "modu.toml",
            Some("[[mcp.servers]]\nname = \"a\"\ntransport = \"stdio\"\ncomand = \"x\"\n"),
            &["mcp", "tools"],
            "error: modu.toml: unknown key `comand` in [mcp.servers[0]]\n",
        ),
        (
            "modu.toml",
            Some("[store]\nkind = \"disk\"\n"),
            &["sessions", "list"],
            "error: modu.toml: `store.kind`: unknown variant `disk`, expected one of `memory`, `sqlite`, `redis`, `postgres`\n",
        ),
    ];
    for (file, contents, args, expected) in cases {
        let _ = std::fs::remove_file(dir.path().join("modu.toml"));
        if let Some(contents) = contents {
            std::fs::write(dir.path().join(file), contents).unwrap();
        }
        let out = output(modu(dir.path(), url).args(args)).await;
        assert_eq!(text(&out.stderr), expected, "{args:?}");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty());
    }

    // An override variable is named instead of the file.
    let _ = std::fs::remove_file(dir.path().join("modu.toml"));
    let out = output(
        modu(dir.path(), url)
            .env("MODU_MODEL__TEMPERATUR", "0.1")
            .args(["run", "hi"]),
    )
    .await;
    assert_eq!(
        text(&out.stderr),
        "error: MODU_MODEL__TEMPERATUR: unknown key `temperatur` in [model]\n"
    );
    assert_eq!(out.status.code(), Some(2));

    // No model anywhere.
    let out = output(modu(dir.path(), url).env_remove("OPENAI_MODEL").args(["run", "hi"])).await;
    assert_eq!(
        text(&out.stderr),
        "error: no model configured: set `model` in [model] of modu.toml, MODU_MODEL__MODEL or OPENAI_MODEL\n"
    );
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_documents_overrides_and_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["--help"][..],
        &["run", "--help"],
        &["chat", "--help"],
        &["doctor", "--help"],
    ] {
        let out = output(modu(dir.path(), "http://127.0.0.1:9/v1").args(args)).await;
        assert!(out.status.success());
        let help = text(&out.stdout);
        assert!(help.contains("MODU_<TABLE>__<KEY>"), "{args:?}: {help}");
        assert!(help.contains("Exit codes: 0 ok, 1"), "{args:?}: {help}");
    }
    for args in [
        &["sessions", "--help"][..],
        &["mcp", "tools", "--help"],
        &["resume", "--help"],
        &["runs", "--help"],
        &["runs", "show", "--help"],
    ] {
        let out = output(modu(dir.path(), "http://127.0.0.1:9/v1").args(args)).await;
        assert!(out.status.success(), "{args:?}");
    }
    let usage = output(modu(dir.path(), "http://127.0.0.1:9/v1").args(["run"])).await;
    assert_eq!(usage.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_from_ollama_host_when_no_openai_variables_are_set() {
    let mock = modu_testing::MockOllamaServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = output(
        modu(dir.path(), "unused")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("OPENAI_MODEL")
            .env("OLLAMA_HOST", mock.base_url())
            .env("MODU_MODEL__MODEL", "llama3.2")
            .args(["run", "Hi there"]),
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "You said: Hi there\n");
    assert_eq!(mock.requests()[0]["model"], json!("llama3.2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_memory_and_limits_come_from_the_config() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let skill = dir.path().join("skills/haiku");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: haiku\ndescription: Answers in haiku.\n---\nAnswer in a 5-7-5 haiku.\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("modu.toml"),
        "[skills]\npath = \"skills\"\nactive = [\"haiku\"]\n\n[memory]\npolicy = \"recent_turns\"\nmax_turns = 1\n\n[model]\ntemperature = 0.25\ntop_p = 0.5\nmax_tokens = 99\n",
    )
    .unwrap();
    for prompt in ["first", "second", "third"] {
        let out = output(modu(dir.path(), &mock.base_url()).args(["run", "--session", "s", prompt])).await;
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let requests = mock.requests();
    let last = transcript(&requests[2]);
    assert!(last[0].starts_with("system: ") && last[0].contains("5-7-5"), "{last:?}");
    // recent_turns = 1: the first turn is gone, the second is kept.
    assert_eq!(
        last[1..],
        ["user: second", "assistant: You said: second", "user: third"]
    );
    assert_eq!(requests[2]["temperature"], json!(0.25));
    assert_eq!(requests[2]["top_p"], json!(0.5));
    assert_eq!(requests[2]["max_tokens"], json!(99));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_host_does_not_override_a_configured_base_url() {
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("modu.toml"),
        format!("[model]\nbase_url = {:?}\nmodel = \"mock-model\"\n", mock.base_url()),
    )
    .unwrap();
    let out = output(
        modu(dir.path(), &mock.base_url())
            .env_remove("OPENAI_BASE_URL")
            .env_remove("OPENAI_MODEL")
            .env("OLLAMA_HOST", "http://127.0.0.1:9")
            .args(["run", "Say hello"]),
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "You said: Say hello\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_key_env_naming_an_unset_variable_is_a_config_error() {
    // A mistyped or unexported variable would send no key: the server's 401 would not say why.
    let mock = MockOpenAiServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("modu.toml"),
        "[model]\nmodel = \"mock-model\"\napi_key_env = \"MODU_TEST_UNSET_KEY\"\n",
    )
    .unwrap();
    let out = output(modu(dir.path(), &mock.base_url()).args(["run", "Say hello"])).await;
    assert_eq!(
        text(&out.stderr),
        "error: [model] api_key_env names \"MODU_TEST_UNSET_KEY\", which is not set (or empty): set it to the API key, or remove api_key_env to send no key\n"
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(mock.requests().is_empty(), "no model request was made");

    // Set, it is sent; left out, OPENAI_API_KEY is optional (a local server takes no key).
    let out = output(
        modu(dir.path(), &mock.base_url())
            .env("MODU_TEST_UNSET_KEY", "sk-test")
            .args(["run", "Say hello"]),
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::fs::write(dir.path().join("modu.toml"), "[model]\nmodel = \"mock-model\"\n").unwrap();
    let out = output(
        modu(dir.path(), &mock.base_url())
            .env_remove("OPENAI_API_KEY")
            .args(["run", "Say hello"]),
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
}
