//! `agentbox export`: write a bundle (history, snapshot, or a rootfs tar).

use std::path::Path;

use super::ctx::Ctx;
use crate::args::ExportArgs;
use crate::errors::{CliError, CliResult};
use crate::render;

pub(super) fn export(ctx: &Ctx, a: ExportArgs) -> CliResult {
    let (env, rest) = ctx.env_and_args(&a.args, 0, 1)?;
    let kind = a
        .kind
        .parse()
        .map_err(|e: String| CliError::usage(e, "use --kind history, snapshot or rootfs"))?;
    let compression = a
        .compress
        .parse()
        .map_err(|e: String| CliError::usage(e, "use --compress zstd, gzip or none"))?;
    let reference = rest.first().map(String::as_str).unwrap_or("HEAD");
    let report = ctx.transfer("exporting", || {
        ctx.boxes()
            .export(&env, reference, kind, compression, &a.output)
    })?;
    let to_stdout = a.output == Path::new("-");
    let summary = format!(
        "exported {} of {env} ({} bundle) to {}",
        render::count(report.nodes, "node", "nodes"),
        report.kind,
        if to_stdout {
            "stdout".to_owned()
        } else {
            a.output.display().to_string()
        }
    );
    if to_stdout {
        // The bundle itself is on stdout: the summary must not be mixed into it.
        ctx.note(summary);
        return ctx.out(&report, String::new);
    }
    ctx.out(&report, || format!("{summary}\n"))
}
