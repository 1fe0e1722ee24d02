//! `agentbox undo`: move a box back to HEAD's parent (a checkout of `HEAD~1`).

use super::checkout::checkout;
use super::ctx::Ctx;
use crate::args::BoxArg;
use crate::errors::CliResult;

pub(super) fn undo(ctx: &Ctx, a: BoxArg) -> CliResult {
    let name = ctx.resolve_box(a.name.as_deref())?.name;
    checkout(ctx, &[name.into_string(), "HEAD~1".to_owned()], false)
}
