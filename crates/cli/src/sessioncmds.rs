//! Sessions (see `agentbox_boxes::sessions`): `session start`, `attach`, `sessions`.

use std::io::{IsTerminal, Write};

use agentbox_boxes::sessions::{AttachOpts, AttachOutcome, DetachKey, SessionInfo, SessionSpec};
use agentbox_sandbox::proto::WinSize;

use crate::args::{AttachArgs, SessionCmd, SessionStartArgs, SessionsArgs};
use crate::commands::Ctx;
use crate::errors::CliError;
use crate::render;
use crate::CliResult;

pub fn session(ctx: &Ctx, cmd: SessionCmd) -> CliResult {
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
    let (rec, argv) = crate::boxcmds::target(
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
pub(crate) fn start_and_attach(
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

pub fn attach(ctx: &Ctx, a: AttachArgs) -> CliResult {
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
fn finish(ctx: &Ctx, box_name: &str, outcome: &AttachOutcome) -> CliResult {
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

pub fn sessions(ctx: &Ctx, a: SessionsArgs) -> CliResult {
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

/// At most `width` characters of `s`, cut with `…`.
fn cut(s: &str, width: usize) -> String {
    match s.char_indices().nth(width.saturating_sub(1)) {
        Some((i, _)) if s.chars().count() > width => format!("{}…", &s[..i]),
        _ => s.to_owned(),
    }
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
            cut(&command, 30),
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
