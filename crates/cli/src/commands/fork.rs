//! `agentbox fork`: a new box from a node of a box's history.

use agentbox_boxes::history::fork::ForkSpec;
use agentbox_boxes::records::record::BoxRecord;
use serde::Serialize;

use super::ctx::Ctx;
use crate::args::ForkArgs;
use crate::errors::CliResult;
use crate::render;

#[derive(Serialize)]
struct Forked<'a> {
    #[serde(flatten)]
    record: &'a BoxRecord,
    head: String,
    forked_from: &'a str,
}

/// `fork [BOX] [NEW] [--at REF]`: with `-b BOX`, the one positional is NEW.
pub(super) fn fork(ctx: &Ctx, a: ForkArgs) -> CliResult {
    let (reference, new) = match (&ctx.env, a.name, a.new) {
        (Some(_), Some(new), None) => (None, Some(new)),
        (_, name, new) => (name, new),
    };
    let src = ctx.resolve_box(reference.as_deref())?;
    let spec = ForkSpec {
        source: src.name.to_string(),
        name: new,
        at: a.at,
    };
    let made = ctx.boxes().fork(&spec, ctx)?;
    let rec = &made.record;
    for g in &rec.repos {
        let at = match &g.sub {
            None => String::new(),
            Some(s) => format!(" ({s}/)"),
        };
        ctx.note(format!("box repository{at} on branch {}", g.branch));
    }
    ctx.out(
        &Forked {
            record: rec,
            head: made.head.clone(),
            forked_from: &src.name,
        },
        || {
            format!(
                "box {:?} (#{}, id {}) forked from {:?}{} (HEAD {})\nRun something: agentbox exec {} -- ls\n",
                rec.name.as_str(),
                rec.index,
                &rec.id[..8.min(rec.id.len())],
                src.name.as_str(),
                spec.at
                    .as_deref()
                    .map(|r| format!(" at {}", render::text(r)))
                    .unwrap_or_default(),
                render::short(&made.head),
                rec.name
            )
        },
    )
}
