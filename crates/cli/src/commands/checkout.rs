//! `agentbox checkout`: make the working tree hold a node's tree.

use std::path::Path;

use serde::Serialize;

use super::ctx::Ctx;
use crate::errors::CliResult;
use crate::render;

pub(super) fn checkout(ctx: &Ctx, args: &[String], keep_processes: bool) -> CliResult {
    let (env, rest) = ctx.env_and_args(args, 1, 1)?;
    let done = ctx.boxes().checkout(&env, &rest[0], keep_processes)?;
    let killed = done.killed;
    if killed > 0 {
        ctx.note(format!(
            "killed {} of box {env:?}",
            render::count(killed, "process", "processes")
        ));
    }
    let node = done.node;
    let state = ctx.boxes().env(&env)?;
    let inside = |m: &Path| {
        std::env::current_dir().is_ok_and(|cwd| cwd.starts_with(m))
            || std::env::var_os("PWD").is_some_and(|p| Path::new(&p).starts_with(m))
    };
    if state.mountpoint.as_deref().is_some_and(inside) {
        // The working tree was remounted: a shell already inside it still sees the old one.
        ctx.note(format!(
            "note: {} was remounted; shells already inside it see the previous tree until they run: cd \"$PWD\"",
            render::place(&state.mountpoint)
        ));
    }
    /// `checkout --json`: the node now HEAD, and how many of the box's processes the
    /// checkout killed (0 for a versioned directory, or with --keep-processes).
    #[derive(Serialize)]
    struct CheckedOut<'a> {
        #[serde(flatten)]
        node: &'a agentbox_store::Node,
        killed: usize,
    }
    ctx.out(
        &CheckedOut {
            node: &node,
            killed,
        },
        || {
            format!(
                "{env}: HEAD is now {} {}\n",
                render::short(&node.id),
                render::text(&node.message)
            )
        },
    )
}
