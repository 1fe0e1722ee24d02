//! `agentbox prune`: remove what boxes left behind (see `agentbox_boxes::prune`).

use agentbox_boxes::prune::{self, Leftover};
use serde::Serialize;

use crate::commands::Ctx;
use crate::CliResult;

#[derive(Serialize)]
struct Pruned<'a> {
    #[serde(flatten)]
    leftover: &'a Leftover,
    /// `removed`, `would remove`, or the error that kept it.
    outcome: String,
}

pub fn prune(ctx: &Ctx, dry_run: bool, min_age: u64) -> CliResult {
    let store = ctx.store()?;
    let found = prune::find(&ctx.home, &store, std::time::Duration::from_secs(min_age))?;
    let rows: Vec<Pruned> = found
        .iter()
        .map(|l| Pruned {
            leftover: l,
            outcome: if dry_run {
                "would remove".to_owned()
            } else {
                match prune::remove(&ctx.home, &store, l) {
                    Ok(()) => "removed".to_owned(),
                    Err(e) => format!("kept: {e}"),
                }
            },
        })
        .collect();
    let failed = rows
        .iter()
        .filter(|r| r.outcome.starts_with("kept"))
        .count();
    ctx.out(&rows, || {
        if rows.is_empty() {
            return "nothing to prune\n".to_owned();
        }
        let mut s = format!("{:<12} {:<13} WHAT\n", "KIND", "OUTCOME");
        for r in &rows {
            s.push_str(&format!(
                "{:<12} {:<13} {}\n",
                r.leftover.kind,
                if r.outcome.starts_with("kept") {
                    "kept"
                } else {
                    &r.outcome
                },
                r.leftover.what
            ));
            if r.outcome.starts_with("kept") {
                s.push_str(&format!("{:<12} {:<13} {}\n", "", "", r.outcome));
            }
        }
        if dry_run {
            s.push_str("(dry run: nothing was removed; run `agentbox prune` to remove these)\n");
        }
        s
    })?;
    if failed > 0 {
        return Err(crate::errors::CliError::new(
            1,
            format!("{failed} leftover(s) could not be removed"),
            Some("see the list above; `agentbox prune --dry-run` shows what remains".into()),
        ));
    }
    Ok(())
}
