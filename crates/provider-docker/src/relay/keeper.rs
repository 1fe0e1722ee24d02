//! The per-box relay process ([`super::host`]) kept alive: started detached (its own
//! process group, its output to the box's `docker-relay.log`, at most
//! [`host::MAX_LOG`] bytes) whenever the box's container
//! is started — create, start, any command that starts it — unless one runs, and stopped
//! when the box is stopped or destroyed. It outlives the command that started it; one that
//! died is started again by the box's next command. Whether one runs is whether it holds
//! [`super::host::lock_path`] (which names its pid), so a stale pid is never signalled.
//!
//! Only a provider given a relay program ([`DockerProvider::with_relay`]: the agentbox
//! binary) starts relays; without one a Docker box has no in-box `agentbox`.

use std::process::Stdio;

use agentbox_boxes::records::record::BoxDirs;
use agentbox_boxes::Result;
use agentbox_core::lock::{FileLock, Mode};
use std::os::unix::process::CommandExt;

use super::host;
use crate::provider::DockerProvider;

/// The hidden command of the agentbox binary that runs a box's relay.
pub const RELAY_COMMAND: &str = "__docker-relay";

/// The pid of box `name`'s running relay, if one runs.
pub fn running(p: &DockerProvider, name: &str) -> Option<i32> {
    let path = host::lock_path(p, name);
    if !path.exists() {
        return None;
    }
    match FileLock::acquire(&path, Mode::TryExclusive, "the relay", "look") {
        // Free: none runs (the lock is let go of at once).
        Ok(_) => None,
        Err(agentbox_core::Error::Locked { holder, .. }) => holder
            .strip_prefix("pid ")
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok()),
        Err(_) => None,
    }
}

/// Start box `name`'s relay unless one runs (or the provider has no relay program).
pub fn ensure(p: &DockerProvider, name: &str) -> Result<()> {
    let Some(program) = p.relay.as_ref() else {
        return Ok(());
    };
    if running(p, name).is_some() {
        return Ok(());
    }
    // Without a static in-box binary there is nothing to relay to: said once, here.
    super::inbox_bin::find()?;
    let dir = BoxDirs::new(&p.home, name).dir;
    let log = fs_err::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("docker-relay.log"))?;
    // Kept small by the relay too (see `host::cap_log`): a box writes to it.
    host::cap_log(log.file());
    let mut child = std::process::Command::new(program)
        .arg(RELAY_COMMAND)
        .arg(name)
        .env("AGENTBOX_HOME", p.home.root())
        .stdin(Stdio::null())
        .stdout(log.try_clone()?.into_file())
        .stderr(log.into_file())
        .process_group(0)
        .spawn()?;
    // Reaped when it ends, should this process still run then (a long-lived front end).
    std::thread::spawn(move || child.wait());
    Ok(())
}

/// Stop box `name`'s relay, if one runs.
pub fn stop(p: &DockerProvider, name: &str) {
    if let Some(pid) = running(p, name).and_then(rustix::process::Pid::from_raw) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        // Until it let go of the lock: a start right after must not find it still there.
        for _ in 0..100 {
            if running(p, name).is_none() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}
