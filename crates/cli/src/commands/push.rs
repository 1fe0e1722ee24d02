//! `agentbox push`: a box's branches to their remotes, from the host.

use super::ctx::Ctx;
use crate::args::PushArgs;
use crate::errors::CliResult;
use crate::render;

/// `push --json`: a list of `{"sub", "repo", "remote", "branch", "commit", "outcome"}`, one
/// per repository. Runs on the host only, as the user, with the user's git configuration
/// and credentials: the box is never involved beyond the sync of its branches.
pub(super) fn push(ctx: &Ctx, a: PushArgs) -> CliResult {
    let rec = ctx.resolve_box(a.name.as_deref())?;
    let results = ctx
        .boxes()
        .push(&rec, a.remote.as_deref(), &a.repos, a.force, ctx)?;
    ctx.out(&results, || render::remote_table(&results))
}
