//! `agentbox attach`: this terminal on a session of a box.

use std::io::Write;

use agentbox_boxes::sessions::{AttachOpts, AttachOutcome, DetachKey};

use super::ctx::Ctx;
use crate::args::AttachArgs;
use crate::errors::{CliError, CliResult};
use crate::render;

/// `attach [BOX] [SESSION]`: the box, and the session when one is named.
fn box_and_session(
    ctx: &Ctx,
    args: &[String],
) -> CliResult<(agentbox_boxes::records::record::BoxRecord, Option<String>)> {
    Ok(match args {
        [] => (ctx.resolve_box(None)?, None),
        [b, s] => (ctx.resolve_box(Some(b))?, Some(s.clone())),
        [one] if ctx.env.is_some() => (ctx.resolve_box(None)?, Some(one.clone())),
        [one] => match ctx.find_box(one)? {
            Some(rec) => (rec, None),
            None => (ctx.resolve_box(None)?, Some(one.clone())),
        },
        _ => {
            return Err(CliError::usage(
                "attach takes [BOX] [SESSION]",
                "agentbox attach BOX SESSION (`agentbox sessions BOX` lists them)",
            ))
        }
    })
}

pub(super) fn attach(ctx: &Ctx, a: AttachArgs) -> CliResult {
    let (rec, session) = box_and_session(ctx, &a.args)?;
    let detach_key = match &a.detach_key {
        Some(k) => Some(DetachKey::parse(k).map_err(|why| {
            CliError::usage(
                format!("--detach-key: {why}"),
                "for example --detach-key \"ctrl-]\" or \"ctrl-a d\"",
            )
        })?),
        None => None,
    };
    let outcome = ctx.boxes().attach(
        &rec.name,
        session.as_deref(),
        AttachOpts {
            detach_key,
            history: !a.no_history,
            tty: None,
        },
    )?;
    finish(ctx, &rec.name, &outcome)
}

/// Say how the attach ended; a session whose process ended gives its status.
pub(super) fn finish(ctx: &Ctx, box_name: &str, outcome: &AttachOutcome) -> CliResult {
    let session = render::text(outcome.session()).into_owned();
    let status = match outcome {
        AttachOutcome::Detached { .. } => {
            ctx.note(format!(
                "agentbox: detached from session {session} of box {box_name:?}; `agentbox attach {box_name} {session}` re-attaches"
            ));
            0
        }
        AttachOutcome::Exited {
            status,
            killed_by_checkout,
            ..
        } => {
            if *killed_by_checkout {
                ctx.note(format!(
                    "agentbox: session {session} was killed by a checkout of its box"
                ));
            } else {
                ctx.note(format!(
                    "agentbox: session {session} ended (status {status})"
                ));
            }
            *status
        }
    };
    if ctx.json {
        ctx.out(outcome, String::new)?;
    }
    let _ = std::io::stdout().flush();
    std::process::exit(status)
}
