//! `agentbox destroy`: remove a box or a versioned directory's environment.

use super::ctx::Ctx;
use crate::errors::{CliError, CliResult};
use crate::render;

pub(super) fn destroy(ctx: &Ctx, args: &[String], delete_branch: bool) -> CliResult {
    // Destroying is never implicit: the box is always named.
    let Some(reference) = ctx.env.clone().or_else(|| args.first().cloned()) else {
        return Err(CliError::usage(
            "destroy needs the box's name (or number, or id)",
            "agentbox destroy BOX; `agentbox list` shows the boxes",
        ));
    };
    if !ctx.boxes().is_directory(&reference) {
        let rec = ctx.resolve_box(Some(&reference))?;
        let name = rec.name.clone();
        let deleted = ctx.boxes().destroy(&name, delete_branch, ctx)?;
        return ctx.out(
            &serde_json::json!({ "destroyed": name, "id": rec.id, "deleted_branches": deleted }),
            || {
                let mut s =
                    format!("destroyed box {name:?} (`agentbox gc` frees unreferenced data)\n");
                for b in &deleted {
                    s.push_str(&format!("deleted branch {b}\n"));
                }
                s
            },
        );
    }
    let env = reference;
    let state = ctx.boxes().remove_directory(&env)?;
    ctx.out(&state, || {
        format!(
            "destroyed environment {env:?} ({} is unmounted; `agentbox gc` frees unreferenced data)\n",
            render::place(&state.mountpoint)
        )
    })
}
