//! A box's processes, read from the container's `/proc` by its own `sh` (PIDs as the box
//! sees them), and signals sent by its `kill`.
//!
//! Not listed: Docker's init (PID 1), the container's keep-alive command
//! ([`crate::spec::KEEP_ALIVE`]) and its `sleep`, and the listing's own shell and its children.

use agentbox_boxes::provider::OnBox;
use agentbox_boxes::types::{ProcInfo, ProcKind};
use agentbox_boxes::{BoxError, Result};
use agentbox_docker::exec::ExecSpec;
use agentbox_docker::Engine;

use crate::errors::remote;
use crate::names;
use crate::provider::DockerProvider;

/// What separates processes in the listing's output (a NUL-framed word no argv holds as
/// a whole between NULs but this one).
const SEP: &[u8] = b"\0agentbox-proc\0";

/// The listing: the shell's PID first, then each process's PID, parent's PID (the field
/// after the last `)` of its `stat`: the command name may hold spaces) and NUL-separated
/// argv.
const LIST: &str = r#"printf '%s' "$$"; for p in /proc/[0-9]*; do p=${p#/proc/}; s=$(cat "/proc/$p/stat" 2>/dev/null) || continue; s=${s##*) }; set -- $s; printf '\0agentbox-proc\0%s\0%s\0' "$p" "$2"; cat "/proc/$p/cmdline" 2>/dev/null; done"#;

/// The processes of the running box's container (PID, argv).
fn read(engine: &Engine, name: &str) -> Result<Vec<(i32, Vec<String>)>> {
    let spec = ExecSpec {
        argv: vec!["sh".into(), "-c".into(), LIST.into()],
        ..Default::default()
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    engine
        .exec(&names::container(name), &spec, None, &mut out, &mut err)
        .map_err(remote)?;
    let mut parts = split(&out, SEP).into_iter();
    let own: Option<i32> = parts
        .next()
        .and_then(|p| std::str::from_utf8(p).ok()?.parse().ok());
    let keep_alive: Vec<String> = crate::spec::KEEP_ALIVE
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let all: Vec<(i32, i32, Vec<String>)> = parts
        .filter_map(|part| {
            let mut fields = part.split(|b| *b == 0);
            let pid: i32 = std::str::from_utf8(fields.next()?).ok()?.parse().ok()?;
            let ppid: i32 = std::str::from_utf8(fields.next()?).ok()?.parse().ok()?;
            let mut argv: Vec<String> = fields
                .map(|f| String::from_utf8_lossy(f).into_owned())
                .collect();
            // cmdline ends each argument with a NUL: the last field is empty.
            if argv.last().is_some_and(String::is_empty) {
                argv.pop();
            }
            Some((pid, ppid, argv))
        })
        .collect();
    let keepers: Vec<i32> = all
        .iter()
        .filter(|(_, _, argv)| *argv == keep_alive)
        .map(|(pid, _, _)| *pid)
        .collect();
    let procs = all
        .into_iter()
        .filter(|(pid, ppid, argv)| {
            *pid != 1
                && Some(*pid) != own
                && Some(*ppid) != own
                && !argv.is_empty()
                && !keepers.contains(pid)
                && !keepers.contains(ppid)
        })
        .map(|(pid, _, argv)| (pid, argv))
        .collect();
    Ok(procs)
}

fn split<'a>(data: &'a [u8], sep: &[u8]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    while let Some(i) = rest.windows(sep.len()).position(|w| w == sep) {
        out.push(&rest[..i]);
        rest = &rest[i + sep.len()..];
    }
    out.push(rest);
    out
}

/// How many processes box `name`'s running container has (beyond its own).
pub(crate) fn count(engine: &Engine, name: &str) -> Result<usize> {
    Ok(read(engine, name)?.len())
}

/// Box `name`'s processes (`Stopped`: its container does not run). Their start time is
/// not read: it is given as the time of the listing.
pub fn list(p: &DockerProvider, name: &str) -> Result<OnBox<Vec<ProcInfo>>> {
    let (_, engine) = p.boxed(name)?;
    if !p.running(&engine, name)? {
        return Ok(OnBox::Stopped);
    }
    let now = chrono::Utc::now();
    Ok(OnBox::Running(
        read(&engine, name)?
            .into_iter()
            .map(|(pid, argv)| ProcInfo {
                id: u64::try_from(pid).unwrap_or(0),
                pid,
                kind: ProcKind::Exec,
                argv,
                started: now,
                exit: None,
            })
            .collect(),
    ))
}

/// Send `signal` to process `target` (a PID in the box) of box `name`.
pub fn kill(p: &DockerProvider, name: &str, target: u64, signal: i32) -> Result<OnBox<()>> {
    let (_, engine) = p.boxed(name)?;
    if !p.running(&engine, name)? {
        return Ok(OnBox::Stopped);
    }
    let spec = ExecSpec {
        argv: vec!["kill".into(), format!("-{signal}"), target.to_string()],
        ..Default::default()
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let status = engine
        .exec(&names::container(name), &spec, None, &mut out, &mut err)
        .map_err(remote)?;
    if status != 0 {
        return Err(BoxError::NoSuchProcess {
            name: name.to_owned(),
            target,
        });
    }
    Ok(OnBox::Running(()))
}
