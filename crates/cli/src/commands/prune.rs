//! `agentbox prune`: remove what boxes left behind (the library does the work, see
//! `agentbox_boxes::lifecycle::directories`; this prints it).

use serde::Serialize;

use super::ctx::Ctx;
use crate::errors::{CliError, CliResult, ExitCode};
use crate::render;

/// One row of the output: a box leftover, or data an interrupted store operation left.
#[derive(Serialize)]
struct Pruned {
    kind: String,
    what: String,
    target: String,
    /// Disk space (store leftovers only).
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes: Option<u64>,
    /// `removed`, `would remove`, or the error that kept it.
    outcome: String,
}

pub(super) fn prune(ctx: &Ctx, dry_run: bool, min_age: u64, all: bool) -> CliResult {
    let found = ctx
        .boxes()
        .prune_all(std::time::Duration::from_secs(min_age), dry_run, all)?;
    let mut rows: Vec<Pruned> = found
        .boxes
        .iter()
        .map(|l| Pruned {
            kind: l.kind.clone(),
            what: l.what.clone(),
            target: l.target.clone(),
            bytes: None,
            outcome: l.outcome.to_string(),
        })
        .collect();
    let store_report = &found.store;
    if let Some(holder) = &store_report.busy {
        ctx.note(format!(
            "store data was not checked: {holder} (half-made data of a running operation is never removed; run prune again when it is idle)"
        ));
    }
    rows.extend(store_report.items.iter().map(|p| Pruned {
        kind: p.leftover.kind.as_str().to_owned(),
        what: p.leftover.what.clone(),
        target: p.leftover.path.display().to_string(),
        bytes: Some(p.leftover.bytes),
        outcome: p.outcome.clone(),
    }));
    let failed = rows
        .iter()
        .filter(|r| r.outcome.starts_with("kept"))
        .count();
    ctx.out(&rows, || {
        if rows.is_empty() {
            return "nothing to prune\n".to_owned();
        }
        let mut s = format!("{:<20} {:<13} {:>10} WHAT\n", "KIND", "OUTCOME", "SIZE");
        for r in &rows {
            s.push_str(&format!(
                "{:<20} {:<13} {:>10} {}{}\n",
                r.kind,
                if r.outcome.starts_with("kept") {
                    "kept"
                } else {
                    &r.outcome
                },
                r.bytes.map(render::bytes).unwrap_or_default(),
                render::text(&r.what),
                if r.bytes.is_some() {
                    format!(": {}", render::text(&r.target))
                } else {
                    String::new()
                }
            ));
            if r.outcome.starts_with("kept") {
                s.push_str(&format!("{:<20} {:<13} {:>10} {}\n", "", "", "", r.outcome));
            }
        }
        if store_report.bytes > 0 || !store_report.items.is_empty() {
            s.push_str(&format!(
                "{} {} of store data\n",
                if dry_run { "would free" } else { "freed" },
                render::bytes(store_report.bytes)
            ));
        }
        if dry_run {
            s.push_str(&format!(
                "(dry run: nothing was removed; run `agentbox prune{}` to remove these)\n",
                if all { " --all" } else { "" }
            ));
        }
        s
    })?;
    if failed > 0 {
        return Err(CliError::new(
            ExitCode::Failure,
            format!(
                "{} could not be removed",
                render::count(failed, "leftover", "leftovers")
            ),
            Some("see the list above; `agentbox prune --dry-run` shows what remains".into()),
        ));
    }
    Ok(())
}
