//! `agentbox diff`: differences between two nodes, or a node and the working tree.

use super::ctx::Ctx;
use crate::args::DiffArgs;
use crate::errors::CliResult;
use crate::render;

pub(super) fn diff(ctx: &Ctx, a: DiffArgs) -> CliResult {
    let (env, rest) = ctx.env_and_args(&a.args, 0, 2)?;
    let from = rest.first().map(String::as_str).unwrap_or("HEAD");
    let to = rest.get(1).map(String::as_str);
    if !a.patch {
        let changes = ctx.boxes().diff(&env, from, to)?;
        return ctx.out(&changes, || render::changes(&changes));
    }
    let patched = ctx.boxes().diff_patch(&env, from, to)?;
    ctx.out(&patched, || {
        let changes: Vec<_> = patched.iter().map(|p| p.change.clone()).collect();
        let mut s = render::changes(&changes);
        for p in patched
            .iter()
            .filter(|p| !render::in_git_dir(&p.change.path))
        {
            if let Some(text) = &p.patch {
                s.push('\n');
                s.push_str(&render::text_block(text));
            }
        }
        s
    })
}
