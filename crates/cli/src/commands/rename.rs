//! `agentbox rename`: a box's display name.

use super::ctx::Ctx;
use crate::errors::{CliError, CliResult};

/// `rename [BOX] NAME`: set (or, with an empty NAME, clear) a box's display name.
pub(super) fn rename(ctx: &Ctx, args: &[String]) -> CliResult {
    let (reference, display) = match args {
        [d] => (None, d.as_str()),
        [b, d] => (Some(b.as_str()), d.as_str()),
        _ => {
            return Err(CliError::usage(
                "rename takes [BOX] NAME",
                "agentbox rename BOX \"new name\" (an empty name clears it)",
            ))
        }
    };
    let rec = ctx.resolve_box(reference)?;
    let display = (!display.is_empty()).then_some(display);
    if let Some(d) = display {
        agentbox_boxes::records::registry::check_display_name(&ctx.home, &rec.name, d)?;
    }
    let rec = agentbox_boxes::records::registry::update(&ctx.home, &rec.name, |r| {
        r.display_name = display.map(str::to_owned)
    })?;
    ctx.out(&rec, || match &rec.display_name {
        Some(d) => format!("box {:?} is shown as {d:?}\n", rec.name),
        None => format!("box {:?} has no display name\n", rec.name),
    })
}
