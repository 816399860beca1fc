//! The throwaway PostgreSQL cluster of [`Services`]: started in a temp folder (as a
//! dedicated user when xtask runs as root), stopped with a fast shutdown.

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{Services, free_port, wait_port};
use crate::{Result, output, run};

/// The user PostgreSQL runs as when xtask runs as root (the server refuses to run as root).
const POSTGRES_USER: &str = "modu-pg";

/// A throwaway PostgreSQL 15 cluster (`initdb` and `postgres` come with the machine image): a
/// fresh data folder under the temp dir, a database `modu` created in single-user mode (no
/// client tools needed), the server on a free 127.0.0.1 port with trust authentication for
/// the user `modu`. Exports `MODU_POSTGRES_URL`.
pub(super) fn start_postgres(services: &mut Services) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("modu-postgres-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let data = dir.join("data");
    std::fs::create_dir_all(&data).map_err(|e| format!("cannot create {}: {e}", data.display()))?;
    services.scratch.push(dir.clone());
    let owner = postgres_owner()?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).map_err(|e| format!("chown {}: {e}", dir.display()))?;
        std::os::unix::fs::chown(&data, Some(uid), Some(gid)).map_err(|e| format!("chown {}: {e}", data.display()))?;
    }
    let command = |program: &str| {
        let mut cmd = Command::new(program);
        // A folder the server's user may enter (xtask's may be root's home).
        cmd.current_dir(&dir);
        if let Some((uid, gid)) = owner {
            use std::os::unix::process::CommandExt;
            cmd.uid(uid).gid(gid);
        }
        cmd
    };
    let out = command("initdb")
        .arg("-D")
        .arg(&data)
        .args(["-U", "modu", "--auth=trust", "-E", "UTF8", "--no-locale"])
        .output()
        .map_err(|e| format!("cannot run initdb (PostgreSQL 15 must be on PATH): {e}"))?;
    if !out.status.success() {
        return Err(format!("initdb failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let mut single = command("postgres")
        .arg("--single")
        .arg("-D")
        .arg(&data)
        .arg("postgres")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run postgres --single: {e}"))?;
    if let Some(mut stdin) = single.stdin.take() {
        stdin
            .write_all(b"CREATE DATABASE modu;\n")
            .map_err(|e| format!("postgres --single: {e}"))?;
    }
    let out = single.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "creating the database modu failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let port = free_port()?;
    let log_path = dir.join("postgres.log");
    let log = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
    // Many tests run in parallel, each with its own pool: allow more than the default 100.
    let child = command("postgres")
        .arg("-D")
        .arg(&data)
        .arg("-k")
        .arg(&dir)
        .args(["-c", "listen_addresses=127.0.0.1", "-p", &port.to_string()])
        .args(["-c", "max_connections=300", "-c", "fsync=off"])
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot start postgres: {e}"))?;
    services.children.push(("postgres".into(), child));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        if text.contains("ready to accept connections") {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("postgres did not start within 30 s:\n{text}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_port(port, Duration::from_secs(10)).map_err(|e| format!("postgres: {e}"))?;
    services.env.insert(
        "MODU_POSTGRES_URL".into(),
        format!("postgres://modu@127.0.0.1:{port}/modu"),
    );
    println!("    postgres on 127.0.0.1:{port}");
    Ok(())
}

/// `Some((uid, gid))` of [`POSTGRES_USER`] (created if missing) when this runs as root.
fn postgres_owner() -> Result<Option<(u32, u32)>> {
    if output(Command::new("id").arg("-u"))?.trim() != "0" {
        return Ok(None);
    }
    let known = Command::new("id")
        .arg(POSTGRES_USER)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !known {
        run(
            "create the postgres user",
            Command::new("useradd").args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                POSTGRES_USER,
            ]),
        )?;
    }
    let id = |flag: &str| -> Result<u32> {
        output(Command::new("id").args([flag, POSTGRES_USER]))?
            .trim()
            .parse()
            .map_err(|e| format!("id {flag} {POSTGRES_USER}: {e}"))
    };
    Ok(Some((id("-u")?, id("-g")?)))
}

/// A fast shutdown (SIGINT: abort open transactions, then exit cleanly), waited for up to 10 s.
pub(super) fn stop_postgres(child: &mut Child) {
    let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
