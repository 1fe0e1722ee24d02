//! `agentbox logs`: the output of a spawned process (`-f`: until it ends).

use std::io::{Read, Seek, Write};
use std::time::Duration;

use agentbox_boxes::records::record::BoxDirs;

use super::ctx::Ctx;
use super::in_box::box_and_id;
use crate::args::LogsArgs;
use crate::errors::{CliError, CliResult};

pub(super) fn logs(ctx: &Ctx, a: LogsArgs) -> CliResult {
    let (name, id) = box_and_id(ctx, &a.args)?;
    let a = ResolvedLogs {
        name,
        id,
        follow: a.follow,
    };
    let path = BoxDirs::new(&ctx.home, &a.name).log(a.id);
    let mut f = fs_err::File::open(&path).map_err(|_| {
        CliError::new(
            crate::errors::ExitCode::NotFound,
            format!("box {:?} has no log for process {}", a.name, a.id),
            Some(format!(
                "`agentbox ps {}` lists running processes; logs exist for spawned ones",
                a.name
            )),
        )
    })?;
    let mut out = std::io::stdout();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = f.read(&mut buf)?;
        if n > 0 {
            if out.write_all(&buf[..n]).is_err() {
                return Ok(());
            }
            continue;
        }
        let _ = out.flush();
        if !a.follow {
            return Ok(());
        }
        let alive = ctx
            .boxes()
            .processes(&a.name)?
            .iter()
            .any(|p| p.id == a.id && p.exit.is_none());
        if !alive {
            // One last read: it may have written just before it ended.
            let pos = f.stream_position()?;
            let _ = pos;
            let n = f.read(&mut buf)?;
            let _ = out.write_all(&buf[..n]);
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

struct ResolvedLogs {
    name: String,
    id: u64,
    follow: bool,
}
