//! Background processes of a Docker box (`spawn`, and what `ps`, `logs` and `kill` know of
//! them), as the local provider has them: an id per process, its output in a log, how it
//! ended kept for `ps`.
//!
//! A process is started by a detached exec ([`Engine::exec_detached`]) of a small `sh`
//! wrapper ([`WRAPPER`]) that runs it as its child, its input `/dev/null` and its output
//! into `/var/log/agentbox/<id>.log` in the box, and when it ends writes its status next
//! to it (`<id>.status`; its PID in `<id>.pid` as it starts). The wrapper runs the process
//! in the foreground: a signal `kill` sends reaches it with the default disposition (a
//! shell's `&` would have it ignore `SIGINT`). `/var/log` is in every box's ignore set: a
//! process's files are no change of the box's.
//!
//! What the host keeps is the table of [`crate::spawned`]. The files in the box are the
//! box's (it can change them): they are read through the engine — the log by
//! [`Engine::read_range`], bounded, never by a host path — and only numbers are taken
//! from the others. Ends are settled whenever the box's processes are looked at
//! ([`settle`]): a status the box wrote; else the engine's word on the wrapper's exec; a
//! process of a container's earlier run is gone with that run (forgotten, as a local box's
//! supervisor forgets them when it stops); one of a container since replaced ended with it
//! (a checkout marks its own as killed by it, [`before_remake`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use agentbox_boxes::provider::{Command, Started};
use agentbox_boxes::types::{output_lines, ProcExit, EXIT_OUTPUT_HEAD, EXIT_OUTPUT_LINES};
use agentbox_boxes::{BoxError, Result};
use agentbox_docker::container::ContainerInfo;
use agentbox_docker::detached::ExecState;
use agentbox_docker::exec::ExecSpec;
use agentbox_docker::Engine;

use crate::errors::{failed, remote};
use crate::log_read::InBox;
use crate::names;
use crate::provider::DockerProvider;
use crate::spawned::{self, Entry};
use crate::spec::WORKSPACE;

/// Where a box's background processes' files are.
pub const DIR: &str = "/var/log/agentbox";

/// The wrapper's `$0`, which tells its shell apart in the box's process list.
const WRAPPER_NAME: &str = "agentbox-spawn";

/// The wrapper: `sh -c WRAPPER agentbox-spawn ID DIR EXACT ARGV...`. It enters the
/// directory (`EXACT` 0: its nearest existing ancestor, as a default directory), checks
/// that the command exists, and only then makes the process's files — an exit before
/// them is the wrapper's (2: no such directory, 127: no such command, 125: no log).
pub const WRAPPER: &str = r#"id=$1; wd=$2; exact=$3; shift 3
if [ "$exact" = 1 ]; then cd "$wd" 2>/dev/null || exit 2
else while [ -n "$wd" ] && [ ! -d "$wd" ]; do wd=${wd%/*}; done; cd "${wd:-/}" || exit 2; fi
command -v "$1" >/dev/null 2>&1 || exit 127
d=/var/log/agentbox
mkdir -p "$d" 2>/dev/null && : > "$d/$id.log" || exit 125
sh -c 'echo $$ > "$0.pid"; exec "$@" </dev/null >"$0.log" 2>&1' "$d/$id" "$@"
s=$?
echo "$s" > "$d/$id.status"
exit "$s""#;

/// What the box says of its background processes: id → (PID, status), each as its files
/// hold it (`None`: no such file, or not a number).
pub const STATES: &str = r#"for f in /var/log/agentbox/*.pid; do [ -f "$f" ] || continue; i=${f##*/}; i=${i%.pid}; p=$(cat "$f" 2>/dev/null); s=$(cat "/var/log/agentbox/$i.status" 2>/dev/null); printf '%s\0%s\0%s\0' "$i" "$p" "$s"; done"#;

/// How long `spawn` waits to see whether the process fails at once (as locally).
const SPAWN_SETTLE: Duration = Duration::from_millis(300);

/// How often the engine is asked about the wrapper meanwhile.
const SETTLE_LOOK: Duration = Duration::from_millis(20);

/// How many times a starting process's PID is looked for (while its wrapper runs).
const PID_LOOKS: u32 = 100;

/// The status a process is given when how it ended cannot be told (killed, as by the
/// removal of its container).
const KILLED: i32 = 128 + 9;

/// The log of process `id`, in the box.
pub fn log_path(id: u64) -> String {
    format!("{DIR}/{id}.log")
}

/// Whether `argv` is a wrapper's (see [`WRAPPER`]).
pub(crate) fn is_wrapper(argv: &[String]) -> bool {
    argv.len() >= 4
        && argv[0] == "sh"
        && argv[1] == "-c"
        && argv[2] == WRAPPER
        && argv[3] == WRAPPER_NAME
}

/// The box's background processes' files as [`STATES`] printed them.
pub(crate) type States = HashMap<u64, (Option<i32>, Option<i32>)>;

/// Parse what [`STATES`] printed (the box's text: anything not a number is no value).
pub(crate) fn parse_states(out: &[u8]) -> States {
    let fields: Vec<&[u8]> = out.split(|b| *b == 0).collect();
    let num = |f: &[u8]| -> Option<i64> { std::str::from_utf8(f).ok()?.trim().parse().ok() };
    fields
        .chunks(3)
        .filter(|c| c.len() == 3)
        .filter_map(|c| {
            let id = u64::try_from(num(c[0])?).ok()?;
            let pid = num(c[1]).and_then(|n| i32::try_from(n).ok());
            let status = num(c[2]).and_then(|n| i32::try_from(n).ok());
            Some((id, (pid, status)))
        })
        .collect()
}

/// Read [`STATES`] in box `name`'s running container.
fn read_states(engine: &Engine, name: &str) -> Result<States> {
    let spec = ExecSpec {
        argv: vec!["sh".into(), "-c".into(), STATES.into()],
        ..Default::default()
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    engine
        .exec(&names::container(name), &spec, None, &mut out, &mut err)
        .map_err(remote)?;
    Ok(parse_states(&out))
}

/// Start `command` in the background in box `name` (started when stopped).
pub fn spawn(p: &DockerProvider, name: &str, command: Command) -> Result<Started> {
    let (rec, engine) = p.boxed(name)?;
    p.ensure_started(&engine, &rec)?;
    let container = names::container(name);
    let info = engine
        .container(&container)
        .map_err(remote)?
        .filter(|c| c.running)
        .ok_or_else(|| BoxError::NotRunning { name: name.into() })?;
    let (dir, exact) = match &command.workdir {
        Some(w) => (w.path.clone(), w.explicit),
        None => (WORKSPACE.to_owned(), true),
    };
    let rendered = agentbox_boxes::types::render_command(&command.argv);
    let mut held = spawned::hold(&p.home, name, "spawn a process")?;
    let id = held.table.allocate();
    let mut argv: Vec<String> = ["sh", "-c", WRAPPER, WRAPPER_NAME]
        .map(str::to_owned)
        .to_vec();
    argv.extend([
        id.to_string(),
        dir.clone(),
        if exact { "1" } else { "0" }.to_owned(),
    ]);
    argv.extend(command.argv.iter().cloned());
    let spec = ExecSpec {
        argv,
        // The image's own PATH (see `crate::run::exec`).
        env: command
            .env
            .iter()
            .filter(|(k, _)| k != "PATH")
            .cloned()
            .collect(),
        workdir: Some("/".into()),
        ..Default::default()
    };
    let exec = engine.exec_detached(&container, &spec).map_err(remote)?;
    held.table.procs.push(Entry {
        id,
        argv: command.argv.clone(),
        started: chrono::Utc::now(),
        container: info.id.clone(),
        run: info.started.clone(),
        exec: exec.clone(),
        pid: 0,
        exit: None,
    });
    held.save()?;
    drop(held);

    // A process that fails at once must not be reported as started: it is given a moment.
    let deadline = Instant::now() + SPAWN_SETTLE;
    let ended = loop {
        match engine.exec_state(&exec).map_err(remote)? {
            ExecState::Running if Instant::now() < deadline => std::thread::sleep(SETTLE_LOOK),
            ExecState::Running => break None,
            ExecState::Exited(s) => break Some(i32::try_from(s).unwrap_or(KILLED)),
            ExecState::Gone => break Some(KILLED),
        }
    };
    let mut states = read_states(&engine, name)?;
    let mut looks = 0;
    while ended.is_none() && states.get(&id).and_then(|s| s.0).is_none() && looks < PID_LOOKS {
        // Its wrapper runs but has not written its PID yet.
        std::thread::sleep(Duration::from_millis(50));
        looks += 1;
        states = read_states(&engine, name)?;
    }
    let (pid, status) = states.get(&id).copied().unwrap_or((None, None));
    let mut held = spawned::hold(&p.home, name, "spawn a process")?;
    match (ended, status) {
        // The wrapper's own exit, before the process was made.
        (Some(s), None) => {
            held.table.procs.retain(|e| e.id != id);
            held.save()?;
            let argv0 = command.argv.first().cloned().unwrap_or_default();
            Err(match s {
                127 => BoxError::Command {
                    message: format!("{argv0}: command not found in the box"),
                    status: 127,
                },
                2 => BoxError::Command {
                    message: format!("the working directory {dir} does not exist in the box"),
                    status: 2,
                },
                _ => failed(format!(
                    "box {name:?}: process {id} ({rendered}) could not be started (status {s}): {DIR} could not be written"
                )),
            })
        }
        (_, Some(status)) => {
            let output = first_lines(&engine, name, id);
            if let Some(e) = held.table.get_mut(id) {
                e.pid = pid.unwrap_or(0);
                e.exit = Some(ProcExit {
                    status,
                    ended: chrono::Utc::now(),
                    killed_by_checkout: false,
                    output: output.clone(),
                });
            }
            held.save()?;
            if status != 0 {
                return Err(BoxError::SpawnExited {
                    name: name.to_owned(),
                    id,
                    command: rendered,
                    status,
                    output,
                });
            }
            Ok(started(id, pid.unwrap_or(0)))
        }
        (None, None) => {
            let pid = pid.ok_or_else(|| {
                failed(format!(
                    "box {name:?}: process {id} ({rendered}) started but the box did not say its PID"
                ))
            })?;
            if let Some(e) = held.table.get_mut(id) {
                e.pid = pid;
            }
            held.save()?;
            Ok(started(id, pid))
        }
    }
}

fn started(id: u64, pid: i32) -> Started {
    Started {
        id,
        pid,
        log: log_path(id).into(),
    }
}

/// The first lines of process `id`'s log (none when it cannot be read).
fn first_lines(engine: &Engine, name: &str, id: u64) -> Vec<String> {
    match engine.read_range(&names::container(name), &log_path(id), 0, EXIT_OUTPUT_HEAD) {
        Ok(Some(head)) => output_lines(&head, EXIT_OUTPUT_LINES),
        _ => Vec::new(),
    }
}

/// Up to `max` bytes of process `id`'s log from `offset`, read through the engine (the
/// box's container running or not; past the log's start in a running one, in the box, see
/// [`crate::log_read`]); `None` when there is none.
pub fn read_log(
    p: &DockerProvider,
    name: &str,
    id: u64,
    offset: u64,
    max: usize,
) -> Result<Option<Vec<u8>>> {
    let (_, engine) = p.boxed(name)?;
    let container = names::container(name);
    let Some(info) = engine.container(&container).map_err(remote)? else {
        // Gone with its container.
        return Ok(None);
    };
    let path = log_path(id);
    if offset > 0 && info.running {
        // Past the start of a log that may be long: only what is new is moved, read in
        // the box, when nothing new is there the engine's stat says so at once.
        match engine.file_size(&container, &path).map_err(remote)? {
            None => return Ok(None),
            Some(size) if size <= offset => return Ok(Some(Vec::new())),
            Some(_) => {}
        }
        match crate::log_read::read(&engine, &container, &path, offset, max).map_err(remote)? {
            InBox::Read(bytes) => return Ok(Some(bytes)),
            InBox::NoLog => return Ok(None),
            InBox::Cannot => {}
        }
    }
    engine
        .read_range(&container, &path, offset, max)
        .map_err(remote)
}

/// Settle box `name`'s table against its container `info` (running or not) and what its
/// files say (`states`, read in it when it runs; see the module's documentation); the
/// table, held and saved.
pub(crate) fn settle(
    p: &DockerProvider,
    engine: &Engine,
    name: &str,
    info: &ContainerInfo,
    states: &States,
) -> Result<spawned::Held> {
    let mut held = spawned::hold(&p.home, name, "look at the box's processes")?;
    let before = serde_json::to_value(&held.table).ok();
    let mut gone_with_run = Vec::new();
    for e in held.table.procs.iter_mut().filter(|e| e.exit.is_none()) {
        if e.container != info.id {
            e.exit = Some(ended(KILLED, Vec::new()));
            continue;
        }
        if !info.running || e.run != info.started {
            gone_with_run.push(e.id);
            continue;
        }
        let (pid, status) = states.get(&e.id).copied().unwrap_or((None, None));
        if let Some(pid) = pid.filter(|_| e.pid == 0) {
            e.pid = pid;
        }
        let status = match status {
            Some(s) => Some(s),
            // Its status file is not there (yet, or removed): the engine knows the wrapper.
            None if e.exec.is_empty() => None,
            None => match engine.exec_state(&e.exec).map_err(remote)? {
                ExecState::Running => None,
                ExecState::Exited(s) => Some(i32::try_from(s).unwrap_or(KILLED)),
                ExecState::Gone => Some(KILLED),
            },
        };
        if let Some(s) = status {
            e.exit = Some(ended(s, first_lines(engine, name, e.id)));
        }
    }
    held.table.procs.retain(|e| !gone_with_run.contains(&e.id));
    if serde_json::to_value(&held.table).ok() != before {
        held.save()?;
    }
    Ok(held)
}

fn ended(status: i32, output: Vec<String>) -> ProcExit {
    ProcExit {
        status,
        ended: chrono::Utc::now(),
        killed_by_checkout: false,
        output,
    }
}

/// Box `name`'s container is about to be made again (a checkout): its background processes
/// that still run are killed with it — noted so, as a local checkout notes its own; those
/// that ended are noted with their status first.
pub(crate) fn before_remake(p: &DockerProvider, engine: &Engine, name: &str) -> Result<()> {
    let Some(info) = engine.container(&names::container(name)).map_err(remote)? else {
        return Ok(());
    };
    let states = if info.running {
        read_states(engine, name)?
    } else {
        States::new()
    };
    let mut held = settle(p, engine, name, &info, &states)?;
    let mut killed = false;
    for e in held.table.procs.iter_mut().filter(|e| e.exit.is_none()) {
        let mut exit = ended(KILLED, first_lines(engine, name, e.id));
        exit.killed_by_checkout = true;
        e.exit = Some(exit);
        killed = true;
    }
    if killed {
        held.save()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boxs_files_give_numbers_or_nothing() {
        let out = b"3\x0012\x00\x004\x0013\x000\x00x\x009\x001\x005\x00 14\n\x00-1\x00";
        let states = parse_states(out);
        assert_eq!(states.get(&3), Some(&(Some(12), None)));
        assert_eq!(states.get(&4), Some(&(Some(13), Some(0))));
        assert_eq!(states.get(&5), Some(&(Some(14), Some(-1))));
        assert_eq!(states.len(), 3, "a triple whose id is no number is none");
        assert!(parse_states(b"").is_empty());
    }

    #[test]
    fn only_the_wrappers_shell_is_a_wrapper() {
        let w: Vec<String> = ["sh", "-c", WRAPPER, WRAPPER_NAME, "1", "/", "1", "sleep"]
            .map(str::to_owned)
            .to_vec();
        assert!(is_wrapper(&w));
        assert!(!is_wrapper(&w[..3]));
        let other: Vec<String> = ["sh", "-c", "sleep 1", WRAPPER_NAME]
            .map(str::to_owned)
            .to_vec();
        assert!(!is_wrapper(&other));
    }
}
