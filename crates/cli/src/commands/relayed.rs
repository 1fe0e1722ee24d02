//! The host's side of the in-box `agentbox` (see `crate::relay` for the in-box side): the
//! supervisor has [`CliRelay`] answer a box's request as the host command it stands for, on
//! that box only ([`confine`] resolves every node it names in the box's own history), with
//! the same commands and printer as the host's own, writing to the caller's stdout and stderr.

use agentbox_boxes::relay::{RelayCall, RelayHandler, RelayRequest};

use super::ctx::Ctx;
use super::{checkout, checkpoint, commit, diff, log, ps, pull, push, show, status, tag};
use crate::errors::{CliError, CliResult};

/// Answers the in-box `agentbox` on the host: the request becomes the host command it
/// stands for, on the caller's box, printed to the caller's stdout and stderr.
pub struct CliRelay {
    pub home: agentbox_core::Home,
}

impl RelayHandler for CliRelay {
    fn answer(
        &self,
        name: &str,
        call: RelayCall,
        stdout: std::fs::File,
        stderr: std::fs::File,
    ) -> i32 {
        let ctx = Ctx::for_relay(self.home.clone(), call.json, name, stdout, stderr);
        let answered = confine(ctx.boxes(), name, call.request)
            .map_err(CliError::from)
            .and_then(|request| answer(&ctx, request));
        match answered {
            Ok(()) => 0,
            Err(e) => {
                ctx.error(&e);
                e.code
            }
        }
    }
}

/// Answer a request of the in-box `agentbox` (see [`crate::relay`]) as the host command it
/// stands for, on the box `ctx` is for.
pub(super) fn answer(ctx: &Ctx, request: agentbox_boxes::relay::RelayRequest) -> CliResult {
    use agentbox_boxes::relay::RelayRequest as R;
    let name = ctx
        .env
        .clone()
        .expect("a relayed request's context names its box");
    let args = |v: Vec<Option<String>>| v.into_iter().flatten().collect::<Vec<_>>();
    match request {
        R::Log { ancestors, leaves } => log::log(
            ctx,
            crate::args::LogArgs {
                args: Vec::new(),
                ancestors,
                leaves,
                max_count: None,
            },
        ),
        R::Show { reference } => show::show(ctx, &args(vec![reference])),
        R::Diff { from, to, patch } => diff::diff(
            ctx,
            crate::args::DiffArgs {
                args: args(vec![from, to]),
                patch,
            },
        ),
        R::Status { usage } => status::status(ctx, &[name], usage),
        R::Commit { message, command } => commit::commit(
            ctx,
            crate::args::CommitArgs {
                args: Vec::new(),
                message,
                command,
            },
        ),
        R::Checkout {
            reference,
            keep_processes,
        } => checkout::checkout(ctx, &[reference], keep_processes),
        R::Undo => checkout::checkout(ctx, &["HEAD~1".to_owned()], false),
        R::Tags => tag::tag(
            ctx,
            crate::args::TagArgs {
                args: Vec::new(),
                delete: None,
            },
        ),
        R::Tag { name, reference } => tag::tag(
            ctx,
            crate::args::TagArgs {
                args: args(vec![Some(name), reference]),
                delete: None,
            },
        ),
        R::Untag { name } => tag::tag(
            ctx,
            crate::args::TagArgs {
                args: Vec::new(),
                delete: Some(name),
            },
        ),
        R::Ps => ps::ps(ctx, Some(&name)),
        R::Push { force, repos } => push::push(
            ctx,
            crate::args::PushArgs {
                name: Some(name),
                remote: None,
                force,
                repos,
            },
        ),
        R::RemoteRefs { repo } => {
            let rec = ctx.resolve_box(Some(&name))?;
            let refs = ctx.boxes().remote_refs(&rec, &repo)?;
            ctx.out(&refs, String::new)
        }
        R::Checkpoint {
            name: checkpoint,
            set_default,
            merged,
            replace,
        } => checkpoint::checkpoint(
            ctx,
            Some(crate::args::CheckpointCmd::Create {
                name: Some(name),
                checkpoint,
                set_default,
                merged,
                replace,
            }),
        ),
        R::Pull { repos } => pull::pull(
            ctx,
            crate::args::PullArgs {
                name: Some(name),
                remote: None,
                branch: None,
                repos,
            },
        ),
    }
}

/// `request` of box `name` with every node it names resolved in the box's own history
/// (see [`agentbox_boxes::relay::scope`]): a full id of a node of that history, or a reference
/// relative to HEAD, which the store walks along the box's own ancestry. A reference to
/// anything else fails here as a node that does not exist, before any command runs.
///
/// Every request naming a node is here; the others name none (`log`, `status`, `commit`,
/// `undo` — HEAD's parent —, `tags`, `untag` — a tag of the box's own —, `ps`, `push`,
/// `pull`, `remote_refs` — repositories of the box's own record, by label —, `checkpoint`
/// — a capture of the box itself).
fn confine(
    boxes: &agentbox_boxes::facade::Boxes,
    name: &str,
    request: RelayRequest,
) -> agentbox_boxes::Result<RelayRequest> {
    use RelayRequest as R;
    let scope = std::cell::OnceCell::new();
    let node = |reference: String| -> agentbox_boxes::Result<String> {
        let scope = match scope.get() {
            Some(s) => s,
            None => {
                let made = boxes.scope(name)?;
                scope.get_or_init(|| made)
            }
        };
        Ok(scope.resolve(&reference)?.into_reference())
    };
    let node_opt = |reference: Option<String>| reference.map(&node).transpose();
    Ok(match request {
        R::Show { reference } => R::Show {
            reference: node_opt(reference)?,
        },
        R::Diff { from, to, patch } => R::Diff {
            from: node_opt(from)?,
            to: node_opt(to)?,
            patch,
        },
        R::Checkout {
            reference,
            keep_processes,
        } => R::Checkout {
            reference: node(reference)?,
            keep_processes,
        },
        R::Tag { name, reference } => R::Tag {
            name,
            reference: node_opt(reference)?,
        },
        other @ (R::Log { .. }
        | R::Status { .. }
        | R::Commit { .. }
        | R::Undo
        | R::Tags
        | R::Untag { .. }
        | R::Ps
        | R::Push { .. }
        | R::Pull { .. }
        | R::RemoteRefs { .. }
        | R::Checkpoint { .. }) => other,
    })
}
