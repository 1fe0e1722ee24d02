//! A box's processes, read from the container's `/proc` by its own `sh` (PIDs as the box
//! sees them), and signals sent by its `kill`.
//!
//! Not listed: Docker's init (PID 1), the container's keep-alive command
//! ([`crate::spec::KEEP_ALIVE`]) and its `sleep`, the listing's own shell and its children,
//! and the wrappers of background processes ([`crate::spawn`]), whose processes are listed
//! by their ids from the host's table.

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

/// What separates the process listing from [`crate::spawn::STATES`]'s in one output.
const SPAWNS: &[u8] = b"\0agentbox-spawns\0";

/// One process of the box, as its `/proc` shows it.
pub(crate) struct Proc {
    pub pid: i32,
    pub argv: Vec<String>,
    /// A background process's (a child of its wrapper, see [`crate::spawn`]): the host's
    /// table says what it is.
    pub spawned: bool,
}

/// The processes of the running box's container (not its own, nor the wrappers of its
/// background processes), and what its background processes' files say.
fn read(engine: &Engine, name: &str) -> Result<(Vec<Proc>, crate::spawn::States)> {
    let script = format!(
        "{LIST}; printf '\\0agentbox-spawns\\0'; {}",
        crate::spawn::STATES
    );
    let spec = ExecSpec {
        argv: vec!["sh".into(), "-c".into(), script],
        ..Default::default()
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    engine
        .exec(&names::container(name), &spec, None, &mut out, &mut err)
        .map_err(remote)?;
    // The last one: the states follow every argv.
    let (listing, states) = match out.windows(SPAWNS.len()).rposition(|w| w == SPAWNS) {
        Some(i) => (&out[..i], &out[i + SPAWNS.len()..]),
        None => (&out[..], &[][..]),
    };
    let mut parts = split(listing, SEP).into_iter();
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
    let wrappers: Vec<i32> = all
        .iter()
        .filter(|(_, _, argv)| crate::spawn::is_wrapper(argv))
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
                && !wrappers.contains(pid)
        })
        .map(|(pid, ppid, argv)| Proc {
            pid,
            argv,
            spawned: wrappers.contains(&ppid),
        })
        .collect();
    Ok((procs, crate::spawn::parse_states(states)))
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
    Ok(read(engine, name)?.0.len())
}

/// The running box's processes and its table of background processes, settled
/// ([`crate::spawn::settle`]); `None` when its container does not run.
fn look(
    p: &DockerProvider,
    engine: &Engine,
    name: &str,
) -> Result<Option<(Vec<Proc>, crate::spawned::Held)>> {
    let Some(info) = engine
        .container(&names::container(name))
        .map_err(remote)?
        .filter(|c| c.running)
    else {
        return Ok(None);
    };
    let (procs, states) = read(engine, name)?;
    let held = crate::spawn::settle(p, engine, name, &info, &states)?;
    Ok(Some((procs, held)))
}

/// Box `name`'s processes (`Stopped`: its container does not run): its background ones
/// by their ids, the others by their PIDs (their start time is not read: it is given as
/// the time of the listing), then the background ones that ended.
pub fn list(p: &DockerProvider, name: &str) -> Result<OnBox<Vec<ProcInfo>>> {
    let (_, engine) = p.boxed(name)?;
    let Some((procs, held)) = look(p, &engine, name)? else {
        return Ok(OnBox::Stopped);
    };
    let now = chrono::Utc::now();
    let entry = |e: &crate::spawned::Entry| ProcInfo {
        id: e.id,
        pid: e.pid,
        kind: ProcKind::Spawn,
        argv: e.argv.clone(),
        started: e.started,
        exit: e.exit.clone(),
    };
    let table = &held.table.procs;
    let mut out: Vec<ProcInfo> = table
        .iter()
        .filter(|e| e.exit.is_none())
        .map(entry)
        .collect();
    out.extend(procs.into_iter().filter(|p| !p.spawned).map(|p| ProcInfo {
        id: u64::try_from(p.pid).unwrap_or(0),
        pid: p.pid,
        kind: ProcKind::Exec,
        argv: p.argv,
        started: now,
        exit: None,
    }));
    let mut ended: Vec<&crate::spawned::Entry> =
        table.iter().filter(|e| e.exit.is_some()).collect();
    ended.sort_by_key(|e| e.exit.as_ref().map(|x| x.ended));
    out.extend(ended.into_iter().map(entry));
    Ok(OnBox::Running(out))
}

/// Send `signal` to process `target` of box `name`: a running background process's id
/// first, else the PID of one of its processes.
pub fn kill(p: &DockerProvider, name: &str, target: u64, signal: i32) -> Result<OnBox<()>> {
    let (_, engine) = p.boxed(name)?;
    let Some((procs, held)) = look(p, &engine, name)? else {
        return Ok(OnBox::Stopped);
    };
    let pid = held
        .table
        .procs
        .iter()
        .find(|e| e.id == target && e.exit.is_none() && e.pid > 0)
        .map(|e| e.pid)
        .or_else(|| {
            procs
                .iter()
                .find(|p| u64::try_from(p.pid).ok() == Some(target))
                .map(|p| p.pid)
        })
        .ok_or_else(|| BoxError::NoSuchProcess {
            name: name.to_owned(),
            target,
        })?;
    // Not held while the box is asked: others may look meanwhile.
    drop(held);
    let spec = ExecSpec {
        argv: vec!["kill".into(), format!("-{signal}"), pid.to_string()],
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
