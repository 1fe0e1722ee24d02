//! `agentbox fsck`: check (and repair) the store's consistency.

use super::ctx::Ctx;
use crate::args::FsckArgs;
use crate::errors::{CliError, CliResult};
use crate::render;

pub(super) fn fsck(ctx: &Ctx, a: FsckArgs) -> CliResult {
    // Not reconciled on open: what a crash left is what fsck is here to report.
    let report = ctx.boxes().fsck(a.repair)?;
    ctx.out(&report, || {
        let mut s = String::new();
        for r in &report.repairs {
            s.push_str(&format!("repaired: {r}\n"));
        }
        for p in &report.problems {
            s.push_str(&format!(
                "problem: {}: {}{}\n",
                p.path.display(),
                p.message,
                if p.repairable {
                    " (fsck --repair fixes it)"
                } else {
                    ""
                }
            ));
        }
        if report.unreferenced_layers > 0 {
            s.push_str(&format!(
                "{} no longer referenced{}: `agentbox gc` (or `agentbox prune`) frees {}\n",
                render::count(report.unreferenced_layers, "layer is", "layers are"),
                if report.leftovers_checked {
                    format!(" ({})", render::bytes(report.unreferenced_bytes))
                } else {
                    String::new()
                },
                if report.unreferenced_layers == 1 { "it" } else { "them" }
            ));
        }
        if !report.leftovers_checked && !a.repair {
            s.push_str("another agentbox process is using the store: half-made data was not checked (run fsck again when it is idle)\n");
        }
        s.push_str(&format!(
            "{}, {}, {}: {}\n",
            render::count(report.nodes, "node", "nodes"),
            render::count(report.layers, "layer", "layers"),
            render::count(report.environments, "environment", "environments"),
            if report.problems.is_empty() {
                "consistent"
            } else {
                "PROBLEMS FOUND"
            }
        ));
        s
    })?;
    if report.problems.is_empty() {
        Ok(())
    } else {
        Err(CliError::new(
            crate::errors::ExitCode::Inconsistent,
            format!(
                "{} found",
                render::count(
                    report.problems.len(),
                    "consistency problem",
                    "consistency problems"
                )
            ),
            Some("run `agentbox fsck --repair`".into()),
        ))
    }
}
