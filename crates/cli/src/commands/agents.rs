//! `agentbox agents`: the agents agentbox can launch.

use super::ctx::Ctx;
use crate::errors::CliResult;
use crate::render;

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
                render::text(&agentbox_boxes::types::render_command(&a.command)),
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
