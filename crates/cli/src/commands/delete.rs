//! `agentbox delete`: delete a node; its children move to its parent.

use super::ctx::Ctx;
use crate::errors::CliResult;
use crate::render;

pub(super) fn delete(ctx: &Ctx, args: &[String]) -> CliResult {
    let (env, rest) = ctx.env_and_args(args, 1, 1)?;
    let node = ctx.boxes().delete_node(&env, &rest[0])?;
    ctx.out(&node, || {
        format!(
            "deleted node {} {} (its children now descend from {}); `agentbox gc` frees its data\n",
            render::short(&node.id),
            render::text(&node.message),
            node.parent
                .as_deref()
                .map(render::short)
                .unwrap_or("nothing")
        )
    })
}
