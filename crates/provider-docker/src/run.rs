//! Commands in a box: the exact argv, in `/workspace` (or the directory asked for), with
//! the box's environment and the caller's additions, attached to this process's standard
//! input and output (or collected), on a terminal when asked; then, with capture, the
//! node their changes make ([`crate::capture`]). A command whose container is removed
//! under it (a checkout makes it again) ends as a `SIGKILL`ed one does (137), as in a
//! local box.

use std::io::Write;
use std::sync::Arc;

use agentbox_boxes::provider::{Collected, Command};
use agentbox_boxes::types::{ExecOutcome, ProcKind};
use agentbox_boxes::Result;
use agentbox_docker::exec::ExecSpec;
use agentbox_docker::{DockerError, Engine};

use crate::errors::remote;
use crate::names;
use crate::provider::DockerProvider;
use crate::spec::WORKSPACE;
use crate::start_failure::Sniff;

/// Run `command` in box `name` (started when stopped), attached to this process.
pub fn exec(p: &DockerProvider, name: &str, command: Command) -> Result<ExecOutcome> {
    let (rec, engine) = p.boxed(name)?;
    p.ensure_started(&engine, &rec)?;
    let container = names::container(name);
    // Which container it runs in: one replaced meanwhile killed it.
    let ran_in = engine.container(&container).map_err(remote)?.map(|c| c.id);
    let workdir = match &command.workdir {
        Some(w) if w.explicit => w.path.clone(),
        Some(w) => existing_dir(&engine, &container, &w.path)?,
        None => WORKSPACE.to_owned(),
    };
    let tty = command.tty.unwrap_or_else(crate::terminal::both_terminals);
    let spec = ExecSpec {
        argv: command.argv.clone(),
        // The image's own PATH, not the host's the caller passes (a local box runs the
        // host's programs; a container, its image's).
        env: command
            .env
            .iter()
            .filter(|(k, _)| k != "PATH")
            .cloned()
            .collect(),
        workdir: Some(workdir),
        user: None,
        tty: tty.then(crate::terminal::size),
        tty_size: None,
    };
    let argv0 = command.argv.first().cloned().unwrap_or_default();
    let cwd = spec.workdir.clone().unwrap_or_default();
    let status = {
        let _raw = tty.then(crate::terminal::RawMode::enter);
        let follower = tty.then(crate::terminal::SizeFollower::start);
        let spec = ExecSpec {
            tty_size: follower.as_ref().map(|f| Arc::clone(&f.size)),
            ..spec.clone()
        };
        let stdin: Box<dyn std::io::Read + Send> = Box::new(std::io::stdin());
        let mut out = Sniff::new(std::io::stdout());
        let mut err = Sniff::new(std::io::stderr());
        let ran = engine.exec(&container, &spec, Some(stdin), &mut out, &mut err);
        let status = match ran {
            Err(DockerError::ExecGone { .. }) => {
                // What it wrote before it was killed is its output.
                out.finish(i64::from(KILLED), &argv0, &cwd)?;
                err.finish(i64::from(KILLED), &argv0, &cwd)?;
                return Ok(ExecOutcome {
                    status: KILLED,
                    node: None,
                    killed_by_checkout: replaced(p, &engine, name, ran_in.as_deref())?,
                    capture_error: None,
                    killed_because: None,
                });
            }
            other => other.map_err(remote)?,
        };
        let sniffed = [
            out.finish(status, &argv0, &cwd)?,
            err.finish(status, &argv0, &cwd)?,
        ];
        if let Some(e) = sniffed.into_iter().flatten().next() {
            return Err(e);
        }
        status
    };
    let label = match command.kind {
        ProcKind::Shell => "shell session".to_owned(),
        _ => agentbox_boxes::types::render_command(&command.argv),
    };
    // Killed as its container was removed, the engine having seen it end first.
    let killed_by_checkout =
        status == i64::from(KILLED) && replaced(p, &engine, name, ran_in.as_deref())?;
    let (node, capture_error) = if command.capture && rec.capture && !killed_by_checkout {
        match crate::capture::auto(p, &engine, &rec, &label) {
            Ok(node) => (node, None),
            Err(e) => (None, Some(e.to_string())),
        }
    } else {
        (None, None)
    };
    Ok(ExecOutcome {
        status: status_of(status),
        node,
        killed_by_checkout,
        capture_error,
        killed_because: None,
    })
}

/// Run `argv` in box `name` (started when stopped) in `cwd` with no input, its output
/// collected; with `capture`, the node its changes make.
pub fn collect(
    p: &DockerProvider,
    name: &str,
    argv: Vec<String>,
    cwd: &str,
    capture: bool,
) -> Result<Collected> {
    let (rec, engine) = p.boxed(name)?;
    p.ensure_started(&engine, &rec)?;
    let container = names::container(name);
    let label = agentbox_boxes::types::render_command(&argv);
    let spec = ExecSpec {
        argv,
        workdir: Some(cwd.to_owned()),
        ..Default::default()
    };
    // One buffer for both streams, in the order they come.
    let output = std::sync::Mutex::new(Vec::new());
    let argv0 = spec.argv.first().cloned().unwrap_or_default();
    let status = {
        let mut out = Sniff::new(Shared(&output));
        let mut err = Sniff::new(Shared(&output));
        let ran = engine.exec(&container, &spec, None, &mut out, &mut err);
        let status = match ran {
            // Killed with its container (see `exec`).
            Err(DockerError::ExecGone { .. }) => i64::from(KILLED),
            other => other.map_err(remote)?,
        };
        let sniffed = [
            out.finish(status, &argv0, cwd)?,
            err.finish(status, &argv0, cwd)?,
        ];
        if let Some(e) = sniffed.into_iter().flatten().next() {
            return Err(e);
        }
        status
    };
    let output = output
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let node = if capture && rec.capture {
        crate::capture::auto(p, &engine, &rec, &label)?
    } else {
        None
    };
    Ok(Collected {
        status: status_of(status),
        output: String::from_utf8_lossy(&output).into_owned(),
        node,
    })
}

/// The status of a command killed with its container, as of a `SIGKILL`ed one.
const KILLED: i32 = 128 + 9;

/// Whether box `name`'s container `ran_in`, which a command ran in, was replaced by
/// another (a checkout made it again): asked once whoever replaces it is done (it holds
/// the box's history lock meanwhile).
fn replaced(p: &DockerProvider, engine: &Engine, name: &str, ran_in: Option<&str>) -> Result<bool> {
    drop(p.history_lock(name, "see what ended a command")?);
    let now = engine
        .container(&names::container(name))
        .map_err(remote)?
        .map(|c| c.id);
    Ok(now.is_some() && now.as_deref() != ran_in)
}

/// A writer into a buffer two writers share.
struct Shared<'a>(&'a std::sync::Mutex<Vec<u8>>);

impl Write for Shared<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The engine's exit status as the process's (128 + N for a signal, as the engine says).
fn status_of(status: i64) -> i32 {
    i32::try_from(status).unwrap_or(1)
}

/// `path`, or its nearest ancestor that exists in the container (a default directory: the
/// box need not have every directory of the host's project).
fn existing_dir(engine: &Engine, container: &str, path: &str) -> Result<String> {
    if path == WORKSPACE {
        return Ok(path.to_owned());
    }
    let spec = ExecSpec {
        argv: [
            "sh",
            "-c",
            "d=$1; while [ -n \"$d\" ] && [ ! -d \"$d\" ]; do d=${d%/*}; done; printf %s \"${d:-/}\"",
            "sh",
            path,
        ]
        .map(str::to_owned)
        .to_vec(),
        ..Default::default()
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let status = engine
        .exec(container, &spec, None, &mut out, &mut err)
        .map_err(remote)?;
    if status != 0 || out.is_empty() {
        return Ok(WORKSPACE.to_owned());
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}
