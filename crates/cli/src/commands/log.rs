//! `agentbox log`: the history as a tree (or a list of ancestors or tips).

use super::ctx::Ctx;
use crate::args::LogArgs;
use crate::errors::CliResult;
use crate::render;

pub(super) fn log(ctx: &Ctx, a: LogArgs) -> CliResult {
    let (env, _) = ctx.env_and_args(&a.args, 0, 0)?;
    if a.ancestors || a.leaves || a.max_count.is_some() {
        let listed = if a.ancestors || a.max_count.is_some() {
            ctx.boxes().ancestors(&env, a.max_count)?
        } else {
            ctx.boxes().leaves(&env)?
        };
        let tags = render::tags_by_node(&listed.tags);
        return ctx.out(&listed.nodes, || {
            listed
                .nodes
                .iter()
                .map(|n| format!("{}\n", render::node_line(n, &listed.head, &tags)))
                .collect()
        });
    }
    let h = ctx.boxes().history(&env)?;
    ctx.out(&h, || render::tree(&h))
}
