//! `agentbox kill`: signal a box's process.

use super::ctx::Ctx;
use super::in_box::box_and_id;
use crate::args::KillArgs;
use crate::errors::{CliError, CliResult};

fn parse_signal(s: &str) -> CliResult<i32> {
    if let Ok(n) = s.parse::<i32>() {
        return Ok(n);
    }
    let name = s.trim_start_matches("SIG").to_ascii_uppercase();
    Ok(match name.as_str() {
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "QUIT" => libc::SIGQUIT,
        "KILL" => libc::SIGKILL,
        "TERM" => libc::SIGTERM,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "STOP" => libc::SIGSTOP,
        "CONT" => libc::SIGCONT,
        _ => {
            return Err(CliError::usage(
                format!("unknown signal {s:?}"),
                "use a number or one of HUP INT QUIT KILL TERM USR1 USR2 STOP CONT",
            ))
        }
    })
}

pub(super) fn kill(ctx: &Ctx, a: KillArgs) -> CliResult {
    let signal = parse_signal(&a.signal)?;
    let (name, id) = box_and_id(ctx, &a.args)?;
    ctx.boxes().kill(&name, id, signal)?;
    ctx.out(
        &serde_json::json!({"signalled": id, "signal": signal}),
        || format!("sent signal {signal} to process {id}\n"),
    )
}
