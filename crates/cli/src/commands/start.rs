//! `agentbox start`: start a box; with `--resume`, relaunch its last agent instead, in a
//! detached session.

use super::agent;
use super::ctx::Ctx;
use crate::args::{AgentArgs, StartArgs};
use crate::errors::CliResult;

pub(super) fn start(ctx: &Ctx, a: StartArgs) -> CliResult {
    let rec = ctx.resolve_box(a.name.as_deref())?;
    match (&rec.last_agent, a.resume) {
        (Some(agent), true) => agent::launch(
            ctx,
            agent,
            AgentArgs {
                name: Some(rec.name.to_string()),
                new: false,
                detach: true,
                supervise: false,
                prompt: None,
                ask: false,
                isolate_config: false,
                args: Vec::new(),
            },
        ),
        (last, _) => {
            start_box(ctx, Some(&rec.name))?;
            if let (Some(agent), false) = (last, a.resume) {
                ctx.note(format!(
                    "its last agent was {agent}: `agentbox start {} --resume` relaunches it (or `agentbox {agent} {}`)",
                    rec.name, rec.name
                ));
            }
            Ok(())
        }
    }
}

fn start_box(ctx: &Ctx, reference: Option<&str>) -> CliResult {
    let name = &ctx.resolve_box(reference)?.name;
    ctx.boxes().start(name)?;
    ctx.out(&serde_json::json!({"box": name, "running": true}), || {
        format!("box {name:?} is running\n")
    })
}
