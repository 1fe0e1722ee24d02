//! `agentbox tag`: list, set, move or delete tags.

use super::ctx::Ctx;
use crate::args::TagArgs;
use crate::errors::CliResult;
use crate::render;

pub(super) fn tag(ctx: &Ctx, a: TagArgs) -> CliResult {
    if let Some(name) = &a.delete {
        let (env, _) = ctx.env_and_args(&a.args, 0, 0)?;
        let id = ctx.boxes().untag(&env, name)?;
        ctx.note(format!("deleted tag {name} (was {})", render::short(&id)));
        return ctx.out(
            &serde_json::json!({"deleted": name, "node": id}),
            String::new,
        );
    }
    let (env, rest) = ctx.env_and_args(&a.args, 0, 2)?;
    match rest.as_slice() {
        [] => {
            let tags = ctx.boxes().tags(&env)?;
            ctx.out(&tags, || {
                let mut s = format!("{:<24} NODE\n", "TAG");
                for (t, id) in &tags {
                    s.push_str(&format!("{:<24} {}\n", render::text(t), render::short(id)));
                }
                s
            })
        }
        [name, reference @ ..] => {
            let reference = reference.first().map(String::as_str).unwrap_or("HEAD");
            let id = ctx.boxes().tag(&env, name, reference)?;
            ctx.out(&serde_json::json!({"tag": name, "node": id}), || {
                format!("{name} -> {}\n", render::short(&id))
            })
        }
    }
}
