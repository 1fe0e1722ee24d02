//! `agentbox claude|codex|opencode` and `agentbox agent NAME`: an agent in a box, and
//! `agentbox AGENT login` (the library does the work: `agentbox_boxes::agents`).

use agentbox_boxes::agents::LaunchSpec;
use agentbox_provider_local::proto::ProcKind;

use super::create::note_resync_conflicts;
use super::ctx::Ctx;
use super::in_box::{box_command, finish_exec};
use super::session::start_and_attach;
use crate::args::{AgentArgs, CommandOpts};
use crate::errors::{CliError, CliResult};
use crate::render;

pub(super) fn launch(ctx: &Ctx, agent: &str, a: AgentArgs) -> CliResult {
    // `agentbox claude login` (unless a box is named `login`).
    if a.name.as_deref() == Some("login") && ctx.find_box("login")?.is_none() {
        return login(ctx, agent);
    }
    let launch = ctx.boxes().launch_agent(
        &LaunchSpec {
            agent: agent.to_owned(),
            box_name: a.name.or_else(|| ctx.env.clone()),
            new: a.new,
            ask: a.ask,
            isolate_config: a.isolate_config,
            prompt: a.prompt,
            args: a.args,
            cwd: agentbox_boxes::records::registry::current_dir()?,
        },
        ctx,
    )?;
    let rec = &launch.record;
    if launch.created {
        ctx.note(format!(
            "made box {} (#{}) for {agent}{}",
            render::text(&rec.name),
            rec.index,
            rec.checkpoint
                .as_deref()
                .map(|c| format!(" from checkpoint {}", render::text(c)))
                .unwrap_or_default()
        ));
        note_resync_conflicts(ctx, rec);
    }
    ctx.note(format!(
        "{agent}'s configuration: {} file(s) updated in the box's own copy",
        launch.synced.copied,
    ));
    if !launch.staged.dropped.is_empty() {
        // Names only (entries and key paths), never a value.
        ctx.note(format!(
            "{agent}'s configuration: left out of the box (not on its allow-list, may carry credentials): {}",
            render::text(&launch.staged.dropped.join(", "))
        ));
    }
    let opts = CommandOpts {
        vars: launch.env.clone(),
        workdir: None,
    };
    // On a terminal (or detached) the agent runs in a session of the box's supervisor,
    // which outlives this command; a script gets a plain command: its output and status.
    if a.detach || std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        let spec = agentbox_boxes::sessions::SessionSpec {
            name: None,
            argv: launch.argv.clone(),
            env: agentbox_boxes::records::record::caller_env(&launch.env),
            workdir: ctx.workdir(rec, None),
            size: None,
            supervise: a.supervise,
        };
        return start_and_attach(ctx, rec, spec, a.detach);
    }
    let outcome = ctx.boxes().exec(
        &rec.name,
        box_command(ctx, rec, launch.argv, &opts, ProcKind::Exec, true, None),
    )?;
    finish_exec(ctx, outcome)
}

/// Save a long-lived token for `agent`: its own set-up command runs on the host (on this
/// terminal), then the token it printed is read from stdin and kept in the agentbox home
/// (mode 0600), for every later launch whose shell does not set the variable.
fn login(ctx: &Ctx, agent: &str) -> CliResult {
    let a = agentbox_boxes::agents::get(&ctx.home, agent)?;
    let Some(var) = a.login_var.clone() else {
        return Err(CliError::usage(
            format!("{agent} has no token to save"),
            "log in inside the box, or set its variables in your shell",
        ));
    };
    if let Some((cmd, args)) = a.login.split_first() {
        ctx.note(format!(
            "running {} on this machine…",
            agentbox_boxes::types::render_command(&a.login)
        ));
        let status = std::process::Command::new(cmd)
            .args(args)
            .status()
            .map_err(|e| {
                CliError::new(
                    crate::errors::ExitCode::NotFound,
                    format!("cannot run {cmd}: {e}"),
                    Some(format!(
                        "install {agent} on the host first, or set {var} in your shell"
                    )),
                )
            })?;
        if !status.success() {
            return Err(CliError::new(
                crate::errors::ExitCode::Failure,
                format!("{cmd} failed ({status})"),
                None,
            ));
        }
    }
    eprint!("paste the token for {var}: ");
    let mut token = String::new();
    std::io::stdin().read_line(&mut token)?;
    if token.trim().is_empty() {
        return Err(CliError::usage(
            "no token given",
            format!("agentbox {agent} login"),
        ));
    }
    let path = agentbox_boxes::agents::save_token(&ctx.home, agent, &token)?;
    ctx.out(&serde_json::json!({ "agent": agent, "saved": path, "variable": var }), || {
        format!(
            "saved; every box's {agent} now gets {var} (unless your shell sets it). It is kept in {} (mode 0600), never in a box.\n",
            path.display()
        )
    })
}
