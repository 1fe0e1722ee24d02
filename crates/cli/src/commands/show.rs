//! `agentbox show`: what a node changed relative to its parent.

use super::ctx::Ctx;
use crate::errors::CliResult;
use crate::render;

pub(super) fn show(ctx: &Ctx, args: &[String]) -> CliResult {
    let (env, rest) = ctx.env_and_args(args, 0, 1)?;
    let reference = rest.first().map(String::as_str).unwrap_or("HEAD");
    let shown = ctx.boxes().show(&env, reference)?;
    ctx.out(&shown, || {
        let mut s = format!(
            "{}\nparent: {}\n",
            render::node_line(&shown.node, &shown.head, &render::tags_by_node(&shown.tags)),
            shown
                .node
                .parent
                .as_deref()
                .map(render::short)
                .unwrap_or("(none)")
        );
        s.push_str(&render::changes(&shown.changes));
        s
    })
}
