//! `agentbox exec`: run a command in a box and wait for it.

use std::io::Write;

use agentbox_boxes::types::ProcKind;

use super::ctx::Ctx;
use super::in_box::{box_command, finish_exec, target};
use crate::args::ExecArgs;
use crate::errors::CliResult;

pub(super) fn exec(ctx: &Ctx, a: ExecArgs) -> CliResult {
    let (rec, argv) = target(
        ctx,
        a.name,
        a.argv,
        Some(("exec", "agentbox exec [BOX] [--] CMD [ARGS...]")),
    )?;
    let tty = if a.tty {
        Some(true)
    } else if a.no_tty || ctx.json {
        Some(false)
    } else {
        None
    };
    // With --json, stdout carries the JSON result alone, so that it parses as one
    // document: the command's own output goes to stderr while it runs (streamed, so a
    // huge output costs no memory; a script keeps it apart with `2>file`).
    let redirect = if ctx.json {
        Some(StdoutToStderr::start()?)
    } else {
        None
    };
    let outcome = ctx.boxes().exec(
        &rec.name,
        box_command(ctx, &rec, argv, &a.opts, ProcKind::Exec, !a.no_capture, tty),
    );
    drop(redirect);
    finish_exec(ctx, outcome?)
}

/// While alive, this process's standard output (descriptor 1) is its standard error; the
/// original is put back on drop. Used around a command whose output must not mix with a
/// JSON result on stdout.
struct StdoutToStderr {
    saved: std::os::fd::OwnedFd,
}

impl StdoutToStderr {
    fn start() -> CliResult<StdoutToStderr> {
        let _ = std::io::stdout().flush();
        // Close-on-exec: a supervisor this command starts must not inherit the caller's
        // stdout, or a reader waiting for its end (a script's `$(…)`) would wait forever.
        let saved =
            rustix::io::fcntl_dupfd_cloexec(std::io::stdout(), 3).map_err(std::io::Error::from)?;
        rustix::stdio::dup2_stdout(std::io::stderr()).map_err(std::io::Error::from)?;
        Ok(StdoutToStderr { saved })
    }
}

impl Drop for StdoutToStderr {
    fn drop(&mut self) {
        let _ = std::io::stdout().flush();
        // Nothing to report it to if this fails: stdout would stay on stderr, which is
        // still a valid stream.
        let _ = rustix::stdio::dup2_stdout(&self.saved);
    }
}
