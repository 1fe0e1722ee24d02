//! Running the `git` command: in a directory, with extra environment or stdin, its
//! failures as [`GitError::Command`] with git's own message.

use std::path::Path;
use std::process::Command;

use crate::{GitError, Result};

/// Run `git ARGS` in `dir`; its stdout, trimmed.
pub(crate) fn git(dir: &Path, args: &[&str]) -> Result<String> {
    git_with(dir, args, &[])
}

/// [`git`] with extra environment variables.
pub(crate) fn git_with(dir: &Path, args: &[&str], env: &[(&str, &Path)]) -> Result<String> {
    run_git(dir, args, env, None)
}

/// Run `git ARGS` in `dir` with `input` on its standard input; its stdout, trimmed.
pub(crate) fn git_stdin(dir: &Path, args: &[&str], input: &str) -> Result<String> {
    run_git(dir, args, &[], Some(input))
}

/// Every git process: `git -C DIR ARGS` with `env` added and `input` (if any) on its
/// standard input; its stdout, trimmed, or an error carrying its stderr.
pub(crate) fn run_git(
    dir: &Path,
    args: &[&str],
    env: &[(&str, &Path)],
    input: Option<&str>,
) -> Result<String> {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, *v)))
        // The user's identity and settings apply; prompts never block.
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(GitError::Spawn)?;
    if let Some(input) = input {
        child
            .stdin
            .take()
            .expect("stdin was piped")
            .write_all(input.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        return Err(GitError::Command {
            dir: dir.to_owned(),
            args: args.join(" "),
            message: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim_end().to_owned())
}

/// The message of a failed git command (the whole error otherwise).
pub(crate) fn command_message(e: GitError) -> String {
    match e {
        GitError::Command { message, .. } => message,
        other => other.to_string(),
    }
}
