//! `agentbox run`: an agent (any command) in a box, relaunched after a checkout killed it
//! with `--supervise`.

use agentbox_boxes::types::ProcKind;

use super::ctx::Ctx;
use super::in_box::{box_command, finish_exec, target};
use crate::args::RunArgs;
use crate::errors::CliResult;

pub(super) fn run(ctx: &Ctx, a: RunArgs) -> CliResult {
    let (rec, argv) = target(
        ctx,
        a.name,
        a.argv,
        Some(("run", "agentbox run [BOX] [--supervise] [--] CMD [ARGS...]")),
    )?;
    let mut launches = 0u32;
    loop {
        launches += 1;
        let outcome = ctx.boxes().exec(
            &rec.name,
            box_command(ctx, &rec, argv.clone(), &a.opts, ProcKind::Exec, true, None),
        )?;
        if a.supervise && outcome.killed_by_checkout {
            ctx.note(format!(
                "agentbox: box {:?} was rolled back; relaunching {} (launch {})",
                rec.name,
                agentbox_boxes::types::render_command(&argv),
                launches + 1
            ));
            continue;
        }
        return finish_exec(ctx, outcome);
    }
}
