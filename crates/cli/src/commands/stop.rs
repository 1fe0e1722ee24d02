//! `agentbox stop`: stop a box; its tree and history stay.

use super::ctx::Ctx;
use crate::errors::CliResult;

pub(super) fn stop(ctx: &Ctx, reference: Option<&str>) -> CliResult {
    let name = &ctx.resolve_box(reference)?.name;
    let was = ctx.boxes().stop(name)?;
    ctx.out(
        &serde_json::json!({"box": name, "was_running": was}),
        || {
            if was {
                format!("box {name:?} stopped\n")
            } else {
                format!("box {name:?} was not running\n")
            }
        },
    )
}
