//! `agentbox ps`: a box's processes.

use super::ctx::Ctx;
use crate::errors::CliResult;
use crate::render;

pub(super) fn ps(ctx: &Ctx, reference: Option<&str>) -> CliResult {
    let name = &ctx.resolve_box(reference)?.name;
    // The running processes, then the recent exits (each with `exit`).
    let procs = ctx.boxes().processes(name)?;
    ctx.out(&procs, || render::procs(&procs))
}
