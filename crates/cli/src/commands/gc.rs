//! `agentbox gc`: free the data of nodes no longer referenced.

use super::ctx::Ctx;
use crate::errors::CliResult;
use crate::render;

pub(super) fn gc(ctx: &Ctx, dry_run: bool) -> CliResult {
    if dry_run {
        let report = ctx.boxes().gc_dry_run()?;
        #[derive(serde::Serialize)]
        struct DryRun<'a> {
            dry_run: bool,
            #[serde(flatten)]
            report: &'a agentbox_store::gc::GcReport,
        }
        let json = DryRun {
            dry_run: true,
            report: &report,
        };
        return ctx.out(&json, || {
            let mut s = format!(
                "would remove {} and {}, freeing about {}; nothing removed\n",
                render::count(
                    report.removed_nodes.len(),
                    "unreachable node",
                    "unreachable nodes"
                ),
                render::count(
                    report.removed_layers.len(),
                    "unreferenced layer",
                    "unreferenced layers"
                ),
                render::bytes(
                    report
                        .disk_bytes_before
                        .saturating_sub(report.disk_bytes_after)
                ),
            );
            for n in &report.removed_nodes {
                s.push_str(&format!("  node  {n}\n"));
            }
            for l in &report.removed_layers {
                s.push_str(&format!("  layer {l}\n"));
            }
            s
        });
    }
    let report = ctx.busy("collecting garbage", || ctx.boxes().gc())?;
    ctx.out(&report, || {
        format!(
            "removed {}; store disk usage {} -> {}\n",
            render::count(
                report.removed_layers.len(),
                "unreferenced layer",
                "unreferenced layers"
            ),
            render::bytes(report.disk_bytes_before),
            render::bytes(report.disk_bytes_after)
        )
    })
}
