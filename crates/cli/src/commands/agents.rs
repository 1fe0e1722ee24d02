//! `agentbox claude|codex|opencode|agent NAME` and `agentbox agents` (the library does the
//! work: `agentbox_boxes::agents`).

use agentbox_boxes::agents::LaunchSpec;
use agentbox_provider_local::proto::ProcKind;

use super::*;
use crate::args::{AgentArgs, CommandOpts};

pub(super) fn launch(ctx: &Ctx, agent: &str, a: AgentArgs) -> CliResult {
    let launch = ctx.boxes().launch_agent(
        &LaunchSpec {
            agent: agent.to_owned(),
            box_name: a.name.or_else(|| ctx.env.clone()),
            new: a.new,
            ask: a.ask,
            prompt: a.prompt,
            args: a.args,
            cwd: agentbox_boxes::project::current_dir()?,
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
    }
    ctx.note(format!(
        "{agent}'s configuration: {} file(s) updated in the box",
        launch.synced.copied
    ));
    let opts = CommandOpts {
        vars: launch.env.clone(),
        workdir: None,
    };
    if a.detach {
        let name = rec.name.to_string();
        let started = ctx.boxes().spawn(
            &name,
            crate::boxcmds::box_command(
                ctx,
                rec,
                launch.argv.clone(),
                &opts,
                ProcKind::Spawn,
                false,
                Some(false),
            ),
        )?;
        return ctx.out(&started, || {
            format!(
                "{agent} started in box {} (process {}); its output: agentbox logs {} {} -f\n",
                render::text(&name),
                started.id,
                render::text(&name),
                started.id
            )
        });
    }
    let outcome = ctx.boxes().exec(
        &rec.name,
        crate::boxcmds::box_command(ctx, rec, launch.argv, &opts, ProcKind::Exec, true, None),
    )?;
    crate::boxcmds::finish_exec(ctx, outcome)
}

pub(super) fn list(ctx: &Ctx) -> CliResult {
    let agents = agentbox_boxes::agents::catalogue(&ctx.home)?;
    ctx.out(&agents, || {
        let mut s = format!(
            "{:<10} {:<8} {:<40} CONFIGURATION\n",
            "AGENT", "FROM", "COMMAND"
        );
        for a in &agents {
            s.push_str(&format!(
                "{:<10} {:<8} {:<40} {}\n",
                render::text(&a.name),
                if a.builtin { "builtin" } else { "agents.yaml" },
                render::text(&agentbox_boxes::render_command(&a.command)),
                a.config
                    .iter()
                    .map(|c| render::text(&c.path))
                    .collect::<Vec<_>>()
                    .join(" ")
            ));
        }
        s
    })
}
