//! What every command run in a box shares (`exec`, `run`, `shell`, `spawn`, `session start`,
//! an agent's launch, `logs`, `kill`): its box and command line, the command as the
//! provider takes it, and how a command that waited for it ends.

use std::io::Write;

use agentbox_boxes::provider::Command;
use agentbox_boxes::records::record::BoxRecord;
use agentbox_boxes::types::ProcKind;
use serde::Serialize;

use super::ctx::Ctx;
use crate::args::CommandOpts;
use crate::errors::{CliError, CliResult};
use crate::render;

/// `exec --json` (and `run`, `shell`, an agent's command): the command's status and the
/// node it made.
#[derive(Serialize)]
struct ExecResult {
    status: i32,
    node: Option<String>,
    killed_by_checkout: bool,
    capture_error: Option<String>,
}

pub(super) fn finish_exec(ctx: &Ctx, outcome: agentbox_boxes::types::ExecOutcome) -> CliResult {
    if let Some(n) = &outcome.node {
        ctx.note(format!("agentbox: recorded node {}", render::short(n)));
    }
    if outcome.killed_by_checkout {
        ctx.note("agentbox: the command was killed by a checkout of its box");
    }
    if let Some(why) = &outcome.killed_because {
        ctx.note(format!("agentbox: the command was killed: {why}"));
    }
    if let Some(e) = &outcome.capture_error {
        ctx.note(format!(
            "agentbox: warning: the command's changes were not recorded as a node: {e}\n  hint: they stay in the box; `agentbox status` shows auto-capture's state, `agentbox commit` records them"
        ));
    }
    if ctx.json {
        ctx.out(
            &ExecResult {
                status: outcome.status,
                node: outcome.node.clone(),
                killed_by_checkout: outcome.killed_by_checkout,
                capture_error: outcome.capture_error.clone(),
            },
            String::new,
        )?;
    }
    let _ = std::io::stdout().flush();
    // The command's own status is ours.
    std::process::exit(outcome.status)
}

/// Remember which agent was started in a box (`last_agent` of its record), so a later
/// session knows what to relaunch.
fn note_agent(ctx: &Ctx, rec: &BoxRecord, argv: &[String]) {
    let Some(agent) = argv.first().and_then(|c| agent_of(c)) else {
        return;
    };
    if rec.last_agent.as_deref() == Some(agent) {
        return;
    }
    if let Err(e) = agentbox_boxes::records::registry::update(&ctx.home, &rec.name, |r| {
        r.last_agent = Some(agent.to_owned())
    }) {
        ctx.note(format!("agentbox: could not record the agent: {e}"));
    }
}

/// The agent a command starts, if it is one agentbox knows.
fn agent_of(command: &str) -> Option<&'static str> {
    let base = command.rsplit('/').next().unwrap_or(command);
    ["claude", "codex", "opencode"]
        .into_iter()
        .find(|a| *a == base)
}

/// `[BOX] [--] CMD…` of a command: the box, and the command (required unless `usage` is
/// `None`); an agent it starts is remembered.
pub(super) fn target(
    ctx: &Ctx,
    name: Option<String>,
    argv: Vec<String>,
    usage: Option<(&str, &str)>,
) -> CliResult<(BoxRecord, Vec<String>)> {
    let (rec, argv) = ctx.box_and_command(name, argv)?;
    if let (Some((what, how)), true) = (usage, argv.is_empty()) {
        return Err(CliError::usage(format!("{what} needs a command"), how));
    }
    note_agent(ctx, &rec, &argv);
    Ok((rec, argv))
}

/// A command for box `rec` with the caller's options (`--env`, `-w`).
pub(super) fn box_command(
    ctx: &Ctx,
    rec: &BoxRecord,
    argv: Vec<String>,
    opts: &CommandOpts,
    kind: ProcKind,
    capture: bool,
    tty: Option<bool>,
) -> Command {
    Command {
        argv,
        env: agentbox_boxes::records::record::caller_env(&opts.vars),
        workdir: ctx.workdir(rec, opts.workdir.clone()),
        kind,
        capture,
        tty,
    }
}

/// `[BOX] ID`: the box and a process id.
pub(super) fn box_and_id(ctx: &Ctx, args: &[String]) -> CliResult<(String, u64)> {
    let (reference, id) = match args {
        [id] => (None, id),
        [b, id] => (Some(b.as_str()), id),
        _ => unreachable!("clap takes one or two values"),
    };
    let id = id.parse::<u64>().map_err(|_| {
        CliError::usage(
            format!("{id:?} is not a process id"),
            "give the id `agentbox spawn` printed or `agentbox ps` shows",
        )
    })?;
    Ok((ctx.resolve_box(reference)?.name.into_string(), id))
}
