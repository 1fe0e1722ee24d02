//! `agentbox mount` and `agentbox unmount`: an environment's directory.

use super::ctx::Ctx;
use crate::errors::CliResult;
use crate::render;

pub(super) fn mount(ctx: &Ctx, args: &[String], mount: bool) -> CliResult {
    let (env, _) = ctx.env_and_args(args, 0, 0)?;
    let state = ctx.boxes().mount(&env, mount)?;
    ctx.out(&state, || {
        format!(
            "{} {}\n",
            if mount { "mounted" } else { "unmounted" },
            render::place(&state.mountpoint)
        )
    })
}
