//! `agentbox spawn`: a background process in a box.

use agentbox_boxes::types::ProcKind;

use super::ctx::Ctx;
use super::in_box::{box_command, target};
use crate::args::BoxCommandArgs;
use crate::errors::CliResult;

pub(super) fn spawn(ctx: &Ctx, a: BoxCommandArgs) -> CliResult {
    let (rec, argv) = target(
        ctx,
        a.name,
        a.argv,
        Some(("spawn", "agentbox spawn [BOX] [--] CMD [ARGS...]")),
    )?;
    let name = rec.name.clone();
    let out = ctx.boxes().spawn(
        &name,
        box_command(
            ctx,
            &rec,
            argv,
            &a.opts,
            ProcKind::Spawn,
            false,
            Some(false),
        ),
    )?;
    let (id, pid) = (out.id, out.pid);
    ctx.out(&out, || {
        format!(
            "started process {id} (pid {pid} in the box)\nOutput: agentbox logs {name} {id} -f\n"
        )
    })
}
