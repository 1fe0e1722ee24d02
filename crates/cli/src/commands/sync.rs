//! `agentbox sync`: bring a box's branches into the host repositories now.

use agentbox_boxes::records::record::BoxRecord;

use super::ctx::Ctx;
use crate::errors::CliResult;
use crate::render;

/// Bring every box branch into its host repository now (through the supervisor, which
/// serialises it with nodes).
fn sync_now(ctx: &Ctx, rec: &BoxRecord) -> CliResult<Vec<agentbox_boxes::types::SyncedRepo>> {
    Ok(ctx.boxes().sync(rec)?)
}

/// `sync --json`: `{"box": NAME, "repos": [{"sub": null|SUB, "repo": PATH, "branch": B,
/// "tip": SHA|null}, …]}`.
pub(super) fn sync(ctx: &Ctx, reference: Option<&str>) -> CliResult {
    let rec = ctx.resolve_box(reference)?;
    let name = &rec.name;
    let repos = sync_now(ctx, &rec)?;
    ctx.out(&serde_json::json!({"box": name, "repos": repos}), || {
        let mut s = String::new();
        for r in &repos {
            match &r.tip {
                Some(t) => s.push_str(&format!(
                    "{} in {} is at {}\n",
                    r.branch,
                    r.repo.display(),
                    render::short_tip(Some(t))
                )),
                None => s.push_str(&format!(
                    "box {name:?} has no branch {} to sync into {}\n",
                    r.branch,
                    r.repo.display()
                )),
            }
        }
        s
    })
}
