//! `agentbox retain`: thin the history.

use super::ctx::Ctx;
use crate::args::RetainArgs;
use crate::errors::CliResult;
use crate::render;

pub(super) fn retain(ctx: &Ctx, a: RetainArgs) -> CliResult {
    let (env, _) = ctx.env_and_args(&a.args, 0, 0)?;
    let report = ctx.boxes().retain(&env, a.keep)?;
    ctx.out(&report, || {
        format!(
            "{env}: kept {}, dropped {}; `agentbox gc` frees their data\n",
            render::count(report.kept, "node", "nodes"),
            report.dropped.len()
        )
    })
}
