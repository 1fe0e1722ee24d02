//! `agentbox commit`: freeze the working tree as a new node.

use agentbox_store::CommitOpts;

use super::ctx::Ctx;
use crate::args::CommitArgs;
use crate::errors::CliResult;
use crate::render;

pub(super) fn commit(ctx: &Ctx, a: CommitArgs) -> CliResult {
    let (env, _) = ctx.env_and_args(&a.args, 0, 0)?;
    let opts = CommitOpts {
        message: a.message,
        command: a.command,
        ..CommitOpts::default()
    };
    let node = ctx.boxes().commit(&env, opts)?;
    ctx.out(&node, || {
        format!(
            "[{env} {}] {}\n",
            render::short(&node.id),
            render::text(&node.message)
        )
    })
}
