//! `agentbox logs`: the output of a spawned process (`-f`: until it ends), read through the
//! box's provider (a local box's log is on the host, a Docker box's inside its container).

use std::io::Write;
use std::time::Duration;

use super::ctx::Ctx;
use super::in_box::box_and_id;
use crate::args::LogsArgs;
use crate::errors::CliResult;

/// How much of a log one read asks for.
const CHUNK: usize = 256 * 1024;

pub(super) fn logs(ctx: &Ctx, a: LogsArgs) -> CliResult {
    let (name, id) = box_and_id(ctx, &a.args)?;
    let boxes = ctx.boxes();
    let mut out = std::io::stdout();
    let mut offset: u64 = 0;
    // The process's state before a read: output it wrote before it ended is read after.
    let mut ended = false;
    loop {
        let chunk = boxes.read_log(&name, id, offset, CHUNK)?;
        if !chunk.is_empty() {
            if out.write_all(&chunk).is_err() {
                return Ok(());
            }
            offset += chunk.len() as u64;
            continue;
        }
        let _ = out.flush();
        if !a.follow || ended {
            return Ok(());
        }
        ended = !boxes
            .processes(&name)?
            .iter()
            .any(|p| p.id == id && p.exit.is_none());
        if !ended {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}
