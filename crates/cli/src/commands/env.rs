//! `agentbox env`: version a directory in place.

use agentbox_store::BackendKind;

use super::ctx::Ctx;
use crate::args::EnvArgs;
use crate::errors::{CliError, CliResult};
use crate::render;

pub(super) fn parse_backend(s: Option<&str>) -> CliResult<Option<BackendKind>> {
    s.map(|s| {
        s.parse::<BackendKind>()
            .map_err(|e| CliError::usage(e, "use --backend btrfs or --backend layers"))
    })
    .transpose()
}

pub(super) fn env(ctx: &Ctx, a: EnvArgs) -> CliResult {
    let made = ctx.boxes().version_dir(
        &agentbox_boxes::lifecycle::directories::VersionDir {
            dir: a.dir.clone(),
            name: a.name.clone(),
            from: a.from.clone(),
            message: a.message.clone(),
            backend: parse_backend(a.backend.as_deref())?,
        },
        ctx,
    )?;
    let state = &made.env;
    ctx.out(&made, || {
            format!(
                "{} is now versioned as environment {:?} (node {}).\nEdit it with any tool, then: agentbox commit {} -m \"what changed\"\n",
                render::place(&state.mountpoint),
                state.name,
                render::short(&state.head),
                state.name
            )
    })
}
