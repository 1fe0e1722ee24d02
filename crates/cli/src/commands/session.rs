//! `agentbox session` (`start`, `ls`) and `agentbox sessions` (see `agentbox_boxes::sessions`).

use std::io::IsTerminal;

use agentbox_boxes::sessions::{AttachOpts, SessionInfo, SessionSpec};
use agentbox_sandbox::proto::WinSize;

use super::attach::finish;
use super::ctx::Ctx;
use super::in_box::target;
use crate::args::{SessionCmd, SessionStartArgs, SessionsArgs};
use crate::errors::CliResult;
use crate::render;

pub(super) fn session(ctx: &Ctx, cmd: SessionCmd) -> CliResult {
    match cmd {
        SessionCmd::Start(a) => start(ctx, a),
        SessionCmd::Ls(a) => sessions(ctx, a),
    }
}

/// The caller's terminal's size, when standard input is one.
fn terminal_size() -> Option<WinSize> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return None;
    }
    rustix::termios::tcgetwinsize(&stdin)
        .ok()
        .filter(|w| w.ws_row > 0 && w.ws_col > 0)
        .map(|w| WinSize {
            rows: w.ws_row,
            cols: w.ws_col,
        })
}

fn start(ctx: &Ctx, a: SessionStartArgs) -> CliResult {
    let (rec, argv) = target(
        ctx,
        a.name,
        a.argv,
        Some((
            "session start",
            "agentbox session start [BOX] [--name NAME] [-d] [--supervise] [--] CMD [ARGS...]",
        )),
    )?;
    let spec = SessionSpec {
        name: a.session,
        argv,
        env: agentbox_boxes::records::record::caller_env(&a.opts.vars),
        workdir: ctx.workdir(&rec, a.opts.workdir.clone()),
        size: terminal_size(),
        supervise: a.supervise,
    };
    start_and_attach(ctx, &rec, spec, a.detach)
}

/// Start session `spec` in box `rec`, then attach this terminal to it (unless `detach`).
pub(super) fn start_and_attach(
    ctx: &Ctx,
    rec: &agentbox_boxes::records::record::BoxRecord,
    mut spec: SessionSpec,
    detach: bool,
) -> CliResult {
    if spec.size.is_none() {
        spec.size = terminal_size();
    }
    let boxes = ctx.boxes();
    let info = boxes.start_session(&rec.name, spec)?;
    let key = boxes.detach_key(&rec.name)?;
    if detach {
        return ctx.out(&info, || {
            format!(
                "session {} started in box {:?} (process {})\nAttach: agentbox attach {} {} (detach: {})\n",
                render::text(&info.name),
                rec.name,
                info.id,
                rec.name,
                render::text(&info.name),
                key.describe()
            )
        });
    }
    ctx.note(format!(
        "agentbox: session {} in box {:?}; detach with {}",
        render::text(&info.name),
        rec.name,
        key.describe()
    ));
    let outcome = boxes.attach(
        &rec.name,
        Some(&info.name),
        AttachOpts {
            detach_key: Some(key),
            history: true,
            tty: None,
        },
    )?;
    finish(ctx, &rec.name, &outcome)
}

pub(super) fn sessions(ctx: &Ctx, a: SessionsArgs) -> CliResult {
    let rec = ctx.resolve_box(a.name.as_deref())?;
    if a.prune {
        let pruned = ctx.boxes().prune_sessions(&rec.name)?;
        if !pruned.is_empty() {
            let names: Vec<String> = pruned
                .iter()
                .map(|s| render::text(&s.name).into_owned())
                .collect();
            ctx.note(format!(
                "removed {} exited session(s): {}",
                pruned.len(),
                names.join(", ")
            ));
        }
    }
    let list = ctx.boxes().sessions(&rec.name)?;
    ctx.out(&list, || table(&list))
}

/// The state column: `running`, `exited N`, `killed by checkout`, with the launch when the
/// session was relaunched.
fn state(s: &SessionInfo) -> String {
    let mut text = match (s.status, s.killed_by_checkout) {
        (None, _) => "running".to_owned(),
        (Some(_), true) => "killed by checkout".to_owned(),
        (Some(status), false) => format!("exited {status}"),
    };
    if s.launches > 1 {
        text.push_str(&format!(" (launch {})", s.launches));
    }
    text
}

/// The table of `agentbox sessions`. Names and commands are escaped (they may hold any
/// text the box's command line had).
fn table(list: &[SessionInfo]) -> String {
    let mut s = format!(
        "{:<16} {:<30} {:<24} {:<19} CLIENTS\n",
        "NAME", "COMMAND", "STATE", "STARTED"
    );
    for i in list {
        let command = render::text(&agentbox_boxes::types::render_command(&i.argv)).into_owned();
        s.push_str(&format!(
            "{:<16} {:<30} {:<24} {:<19} {}\n",
            render::text(&i.name),
            render::cut(&command, 30),
            state(i),
            i.started.format("%Y-%m-%d %H:%M:%S"),
            i.clients
        ));
        if let Some(e) = &i.error {
            s.push_str(&format!("  | {}\n", render::text(e)));
        }
    }
    s
}
