//! `git-remote-agentbox`: inside a box, git's remote helper for the box repositories'
//! remotes (`remote.origin.url = agentbox::origin`, set when the box is made), so an
//! agent's own `git fetch`, `git pull` and `git push` reach the host's remotes — through
//! the host, with the host's credentials, under the same policy as `agentbox push`/`pull`:
//! the host picks the remote; only the box's own branch is pushed; nothing the box says
//! reaches the host's git command line.
//!
//! Protocol (gitremote-helpers(7)): `capabilities` → `fetch`, `push`, `option`;
//! `list` → the host fetches the remote's branches into the host repository's object store
//! (which the box's repository borrows read-only) and the helper lists them, so `fetch`
//! has nothing left to transfer; `push` → the host syncs the box's branch and pushes it.

use std::io::{BufRead, Read, Seek, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use agentbox_boxes::relay::{RelayCall, RelayRequest};

/// Whether this process was started as the remote helper.
pub fn is_helper(argv0: &std::ffi::OsStr) -> bool {
    Path::new(argv0)
        .file_name()
        .is_some_and(|n| n == "git-remote-agentbox")
}

/// Serve git on stdin/stdout; the exit status.
pub fn main() -> i32 {
    match serve() {
        Ok(()) => 0,
        Err(why) => {
            eprintln!("git-remote-agentbox: {why}");
            128
        }
    }
}

/// The repository git runs the helper for, as the box's record labels it (`.` for
/// `/workspace`, else its sub-directory).
fn repo_label() -> Result<String, String> {
    let git_dir = std::env::var_os("GIT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| ".git".into());
    let cwd = std::env::current_dir().map_err(|e| format!("current directory: {e}"))?;
    let abs = if git_dir.is_absolute() {
        git_dir
    } else {
        cwd.join(git_dir)
    };
    let work = abs
        .parent()
        .ok_or("the repository has no working tree")?
        .to_owned();
    let work = std::fs::canonicalize(&work).unwrap_or(work);
    let rel = work
        .strip_prefix(agentbox_boxes::records::record::WORKSPACE)
        .map_err(|_| {
            format!(
                "{} is not a repository of the box's /workspace",
                work.display()
            )
        })?;
    Ok(match rel.to_string_lossy().as_ref() {
        "" => ".".to_owned(),
        s => s.to_owned(),
    })
}

/// Ask the host; its JSON answer.
fn ask(request: RelayRequest) -> Result<serde_json::Value, String> {
    let client = agentbox_provider_local::client::Client::inside_box()
        .ok_or("this is not a box (no supervisor to ask)")?;
    let mut out = tempfile::tempfile().map_err(|e| format!("a scratch file: {e}"))?;
    let mut err = tempfile::tempfile().map_err(|e| format!("a scratch file: {e}"))?;
    let stdin = std::io::stdin();
    let status = client
        .relay_with(
            RelayCall {
                json: true,
                request,
            },
            [stdin.as_fd(), out.as_fd(), err.as_fd()],
        )
        .map_err(|e| e.to_string())?;
    let read = |f: &mut std::fs::File| {
        let mut s = String::new();
        let _ = f.rewind();
        let _ = f.read_to_string(&mut s);
        s
    };
    let text = read(&mut out);
    if status != 0 {
        let said: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let message = said["error"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| read(&mut err).trim().to_owned());
        return Err(message);
    }
    serde_json::from_str(&text).map_err(|e| format!("the host's answer: {e}"))
}

/// The branch this box may push (`agentbox.branch` of the repository; the host checks again).
fn own_branch() -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["config", "--get", "agentbox.branch"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn serve() -> Result<(), String> {
    let repo = repo_label()?;
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    let mut lines = stdin.lock().lines();
    let mut say = |s: &str| -> Result<(), String> {
        out.write_all(s.as_bytes())
            .and_then(|()| out.flush())
            .map_err(|e| format!("writing to git: {e}"))
    };
    while let Some(line) = lines.next() {
        let line = line.map_err(|e| format!("reading from git: {e}"))?;
        let line = line.trim_end();
        if line.is_empty() {
            return Ok(());
        }
        if line == "capabilities" {
            say("fetch\npush\noption\n\n")?;
        } else if line.starts_with("option ") {
            say("unsupported\n")?;
        } else if line == "list" || line == "list for-push" {
            let refs = ask(RelayRequest::RemoteRefs { repo: repo.clone() })?;
            let mut s = String::new();
            for r in refs.as_array().into_iter().flatten() {
                if let (Some(id), Some(name)) = (r["id"].as_str(), r["name"].as_str()) {
                    s.push_str(&format!("{id} {name}\n"));
                }
            }
            s.push('\n');
            say(&s)?;
        } else if line.starts_with("fetch ") {
            // The objects are already in the borrowed host store: read the batch, done.
            for more in lines.by_ref() {
                if more
                    .map_err(|e| format!("reading from git: {e}"))?
                    .trim()
                    .is_empty()
                {
                    break;
                }
            }
            say("\n")?;
        } else if let Some(first) = line.strip_prefix("push ") {
            let mut specs = vec![first.to_owned()];
            for more in lines.by_ref() {
                let more = more.map_err(|e| format!("reading from git: {e}"))?;
                match more.trim().strip_prefix("push ") {
                    Some(spec) => specs.push(spec.to_owned()),
                    None => break,
                }
            }
            let mut s = String::new();
            let own = own_branch();
            for spec in specs {
                let force = spec.starts_with('+');
                let dst = spec.rsplit(':').next().unwrap_or("").to_owned();
                let allowed = own
                    .as_deref()
                    .is_some_and(|b| dst == format!("refs/heads/{b}"));
                if !allowed {
                    s.push_str(&format!(
                        "error {dst} a box pushes only its own branch{}\n",
                        own.as_deref()
                            .map(|b| format!(" ({b}): git push origin {b}"))
                            .unwrap_or_default()
                    ));
                    continue;
                }
                match ask(RelayRequest::Push {
                    force,
                    repos: vec![repo.clone()],
                }) {
                    // The host pushed the branch *it* keeps for this box; `agentbox.branch`
                    // is the box's own (editable) config, so only the host's answer counts.
                    Ok(done) => {
                        let pushed = done
                            .as_array()
                            .and_then(|r| r.first())
                            .and_then(|r| r["branch"].as_str())
                            .map(|b| format!("refs/heads/{b}"));
                        if pushed.as_deref() == Some(dst.as_str()) {
                            s.push_str(&format!("ok {dst}\n"));
                        } else {
                            s.push_str(&format!(
                                "error {dst} a box pushes only its own branch ({})\n",
                                pushed.as_deref().unwrap_or("none")
                            ));
                        }
                    }
                    Err(why) => s.push_str(&format!("error {dst} {}\n", why.replace('\n', " "))),
                }
            }
            s.push('\n');
            say(&s)?;
        } else {
            return Err(format!("unknown command from git: {line:?}"));
        }
    }
    Ok(())
}
