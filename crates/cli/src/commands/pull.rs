//! `agentbox pull`: fetch on the host and merge into the box's branches.

use agentbox_boxes::records::record;

use super::ctx::Ctx;
use crate::args::PullArgs;
use crate::errors::CliResult;
use crate::render;

/// `pull --json`: a list like `push`'s. A merge that conflicts leaves the box repository in
/// its conflicted state; the exit code is then 4.
pub(super) fn pull(ctx: &Ctx, a: PullArgs) -> CliResult {
    let rec = ctx.resolve_box(a.name.as_deref())?;
    let results = ctx.boxes().pull(
        &rec,
        a.remote.as_deref(),
        a.branch.as_deref(),
        &a.repos,
        ctx,
    )?;
    for r in &results {
        if let Some(out) = &r.output {
            let inside =
                std::path::Path::new(record::WORKSPACE).join(r.sub.as_deref().unwrap_or(""));
            ctx.note(format!("{}: {}", inside.display(), render::text(out)));
        }
    }
    ctx.out(&results, || render::remote_table(&results))?;
    match agentbox_boxes::history::remote::pull_problem(&rec, &results) {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}
