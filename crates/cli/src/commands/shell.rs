//! `agentbox shell`: an interactive shell in a box (or a command on a terminal).

use agentbox_boxes::types::ProcKind;

use super::ctx::Ctx;
use super::in_box::{box_command, finish_exec, target};
use crate::args::BoxCommandArgs;
use crate::errors::CliResult;

pub(super) fn shell(ctx: &Ctx, a: BoxCommandArgs) -> CliResult {
    let (rec, argv) = target(ctx, a.name, a.argv, None)?;
    let (argv, tty) = shell_command(argv);
    let outcome = ctx.boxes().exec(
        &rec.name,
        box_command(ctx, &rec, argv, &a.opts, ProcKind::Shell, true, Some(tty)),
    )?;
    finish_exec(ctx, outcome)
}

/// What `agentbox shell` runs, and whether on a terminal: `argv` (empty: the box's
/// shell), on a PTY only when the caller's stdin is a terminal. Without one the shell reads
/// the caller's own stdin and ends at its end: a PTY would keep the end of input from ever
/// reaching it, and an interactive shell ignores the SIGTERM that must end it.
fn shell_command(argv: Vec<String>) -> (Vec<String>, bool) {
    use std::io::IsTerminal;
    let tty = std::io::stdin().is_terminal();
    if !argv.is_empty() {
        return (argv, tty);
    }
    // bash when the base has it; `-l` would read the host's profile, so it is not used.
    let shell = if tty {
        "if command -v bash >/dev/null; then exec bash -i; else exec sh -i; fi"
    } else {
        "if command -v bash >/dev/null; then exec bash; else exec sh; fi"
    };
    (
        vec!["/bin/sh".to_owned(), "-c".to_owned(), shell.to_owned()],
        tty,
    )
}
