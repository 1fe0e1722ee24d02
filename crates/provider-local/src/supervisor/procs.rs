//! The box's processes: the environment they get, starting them through PID 1 (foreground
//! and background), signalling them, and an exec's end (its node, an out-of-memory kill).

use super::*;

/// The environment of a command: the homes of the host user's toolchains (when they are
/// not below the box's `HOME`), the caller's allow-listed variables, the box's own, then
/// the request's extras; `PATH` gains the directory of the box's agentbox binary.
pub(super) fn command_env(shared: &Shared, given: Vec<(String, String)>) -> Vec<(String, String)> {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    // Commands run as the box's root; the caller's own HOME, USER and LOGNAME describe a
    // host account the box does not have.
    env.insert("HOME".into(), "/root".into());
    env.insert("USER".into(), "root".into());
    env.insert("LOGNAME".into(), "root".into());
    env.insert(
        "PATH".into(),
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
    );
    // Before the request's own: a command given other values keeps them.
    env.extend(broker::env(shared));
    // Where the host user's toolchains are, when their home is not the box's; what the
    // caller or the box's configuration sets wins.
    for (k, v) in lock(&shared.tool_env).iter() {
        env.insert(k.clone(), v.clone());
    }
    for (k, v) in given {
        env.insert(k, v);
    }
    for kv in &shared.rec.env {
        if let Some((k, v)) = kv.split_once('=') {
            env.insert(k.to_owned(), v.to_owned());
        }
    }
    env.insert("AGENTBOX_BOX".into(), shared.name.clone());
    if let Some(path) = env.get_mut("PATH") {
        *path = format!("/run/agentbox/bin:{path}");
    }
    env.into_iter().collect()
}

/// Send a spawn to PID 1 and wait for its answer.
pub(super) fn start_process(
    shared: &Shared,
    info: ProcInfo,
    env: Vec<(String, String)>,
    cwd: Option<Workdir>,
    pty: Option<agentbox_sandbox::proto::WinSize>,
    fds: &[BorrowedFd<'_>],
    exit_tx: Option<Sender<ExitNote>>,
) -> Result<(i32, Vec<OwnedFd>)> {
    let id = info.id;
    let argv = info.argv.clone();
    let (tx, rx) = channel();
    let pending = Pending {
        started: tx,
        info,
        exit_tx,
    };
    // Pending before the generation's lock is let go: a capture that stops a quiet box
    // (see [`super::quiet`]) decides under that lock, and must see this command coming.
    let ctl = current_ctl_with(shared, || {
        lock(&shared.pending).insert(id, pending);
    })?;
    let cwd = cwd.unwrap_or_else(|| Workdir::default_for(WORKSPACE));
    let msg = ToInit::Spawn {
        id,
        argv,
        env: command_env(shared, env),
        cwd: cwd.path,
        pty,
        exact_cwd: cwd.explicit,
    };
    if let Err(e) = ipc::send(&*ctl, &msg, fds) {
        lock(&shared.pending).remove(&id);
        return Err(BoxError::Supervisor(format!(
            "the box did not take the command: {e}"
        )));
    }
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok(started)) => Ok(started),
        Ok(Err((message, status))) => Err(BoxError::Command { message, status }),
        Err(_) => {
            lock(&shared.pending).remove(&id);
            Err(BoxError::Supervisor(
                "the box did not start the command".into(),
            ))
        }
    }
}

/// The running box's control socket, waiting out a restart (a checkout in progress, or
/// the capture of a quiet box); `then` runs once, under the generation's lock, when it is
/// found.
fn current_ctl_with(shared: &Shared, then: impl FnOnce()) -> Result<Arc<OwnedFd>> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut then = Some(then);
    loop {
        let box_ = lock(&shared.box_);
        if let Some(ctl) = box_.as_ref().map(|g| g.ctl.clone()) {
            if let Some(f) = then.take() {
                f();
            }
            return Ok(ctl);
        }
        drop(box_);
        if std::time::Instant::now() > deadline {
            return Err(BoxError::Supervisor(
                "the box did not come back from a restart within 30 s".into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

pub(super) fn new_info(shared: &Shared, kind: ProcKind, argv: Vec<String>) -> ProcInfo {
    ProcInfo {
        id: shared.next_id.fetch_add(1, Ordering::SeqCst),
        pid: 0,
        kind,
        argv,
        started: Utc::now(),
        exit: None,
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn exec(
    shared: &Arc<Shared>,
    conn: &OwnedFd,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    cwd: Option<Workdir>,
    tty: Option<agentbox_sandbox::proto::WinSize>,
    kind: ProcKind,
    capture: bool,
    fds: Vec<OwnedFd>,
) -> Result<()> {
    if tty.is_none() && fds.len() != 3 {
        return Err(BoxError::Supervisor(format!(
            "exec needs the caller's stdin, stdout and stderr (got {} descriptors)",
            fds.len()
        )));
    }
    let label = match kind {
        ProcKind::Shell => "shell session".to_owned(),
        _ => agentbox_boxes::types::render_command(&argv),
    };
    let info = new_info(shared, kind, argv);
    let id = info.id;
    // Until the command's own capture is done (see [`super::foreground`]).
    let mode = super::foreground::Mode::of(tty.is_some() || kind == ProcKind::Shell, capture);
    let _foreground = shared.foreground.enter(id, label.clone(), mode);
    let at_end = mode == super::foreground::Mode::AtEnd && shared.rec.capture;
    // A batch command's node is made at its end: its settled files are copied meanwhile,
    // unless the box is quiet, when that node will most likely hand the layer over
    // instead (see [`super::quiet`]): then copies would only compete with the command.
    let quiet_now = shared.quiet_handoff
        && lock(&shared.box_)
            .as_ref()
            .is_some_and(|g| super::quiet::is_quiet(shared, g));
    let prestager = (at_end && !quiet_now)
        .then(|| super::prestager::start(shared))
        .flatten();
    let oom_before = oom_kills(shared);
    let (exit_tx, exit_rx) = channel();
    let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(|f| f.as_fd()).collect();
    let (pid, master) = start_process(shared, info, env, cwd, tty, &borrowed, Some(exit_tx))?;
    drop(fds);
    let attached: Vec<BorrowedFd<'_>> = master.iter().map(|f| f.as_fd()).collect();
    reply(conn, &Reply::Started { id, pid }, &attached);
    drop(master);
    // Signals from the caller; a caller that goes away hangs the command up, as a terminal
    // would.
    if let Ok(conn2) = conn.try_clone() {
        let shared = shared.clone();
        std::thread::spawn(move || loop {
            let signal = match ipc::recv::<Request>(&conn2) {
                Ok((Request::Signal { signal }, _)) => signal,
                Ok(_) => continue,
                Err(_) => libc::SIGHUP,
            };
            let ctl = lock(&shared.box_).as_ref().map(|g| g.ctl.clone());
            // The same process, not a later one that reused its PID.
            if lock(&shared.procs)
                .get(&pid)
                .is_none_or(|p| p.info.id != id)
            {
                return;
            }
            if let Some(ctl) = ctl {
                let _ = ipc::send(&*ctl, &ToInit::Signal { pid, signal }, &[]);
            }
            if signal == libc::SIGHUP {
                return;
            }
        });
    }
    let note = exit_rx.recv().unwrap_or(ExitNote {
        status: 128 + libc::SIGKILL,
        by_checkout: false,
    });
    // A SIGKILL while the box's OOM killer struck: the memory limit, not a checkout or a
    // `kill -9`, ended it.
    let killed_because = match (oom_before, note.status == 128 + libc::SIGKILL) {
        (Some(before), true) if !note.by_checkout && oom_kills(shared) > Some(before) => {
            shared.rec.limits.memory_bytes.map(|limit| {
                format!(
                    "the box ran out of memory (limit {}; --memory raises it)",
                    agentbox_boxes::cgroup::size_text(limit)
                )
            })
        }
        _ => None,
    };
    let prestaged = prestager.and_then(super::prestager::Prestager::finish);
    let (node, capture_error) = if capture && shared.rec.capture && !note.by_checkout {
        match auto_capture(shared, &label, Some(&label), false, prestaged, true) {
            Ok(node) => (node, None),
            Err(e) => (None, Some(e.to_string())),
        }
    } else {
        (None, None)
    };
    reply(
        conn,
        &Reply::Exited {
            status: note.status,
            node,
            killed_by_checkout: note.by_checkout,
            capture_error,
            killed_because,
        },
        &[],
    );
    Ok(())
}

/// The box's OOM-kill count (see [`agentbox_boxes::cgroup::BoxCgroup::oom_kills`]); `None` for a
/// box without a memory limit, whose commands the box's OOM killer never ends.
pub(super) fn oom_kills(shared: &Shared) -> Option<u64> {
    shared.rec.limits.memory_bytes?;
    agentbox_boxes::cgroup::BoxCgroup::open(&record::cgroup_name(&shared.home, &shared.name))
        .ok()
        .flatten()?
        .oom_kills()
}

pub(super) fn spawn_bg(
    shared: &Arc<Shared>,
    conn: &OwnedFd,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    cwd: Option<Workdir>,
) -> Result<()> {
    let command = agentbox_boxes::types::render_command(&argv);
    let info = new_info(shared, ProcKind::Spawn, argv);
    let id = info.id;
    let log_path = shared.dirs.log(id);
    let log = fs_err::File::create(&log_path)?.into_parts().0;
    let null = fs_err::File::open("/dev/null")?.into_parts().0;
    let fds = [null.as_fd(), log.as_fd(), log.as_fd()];
    let (exit_tx, exit_rx) = channel();
    let (pid, _) = start_process(shared, info, env, cwd, None, &fds, Some(exit_tx))?;
    // A process that fails at once (a bad argument, a port taken) must not be reported as
    // started: give it a moment. One still running after it counts as started; one that
    // ended cleanly is no failure (`ps` shows its exit).
    match exit_rx.recv_timeout(SPAWN_SETTLE) {
        Ok(note) if note.status != 0 => Err(BoxError::SpawnExited {
            name: shared.name.clone(),
            id,
            command,
            status: note.status,
            output: first_lines(&log_path, EXIT_OUTPUT_LINES),
        }),
        _ => {
            reply(conn, &Reply::Started { id, pid }, &[]);
            Ok(())
        }
    }
}

/// How long `spawn` waits to see whether the process fails at once.
pub(super) const SPAWN_SETTLE: Duration = Duration::from_millis(300);

pub(super) fn kill_one(shared: &Shared, conn: &OwnedFd, target: u64, signal: i32) -> Result<()> {
    // An id (as spawn and ps print it) first; a PID inside the box only when no id matches.
    let procs = lock(&shared.procs);
    let pid = procs
        .values()
        .find(|p| p.info.id == target)
        .or_else(|| procs.values().find(|p| p.info.pid as u64 == target))
        .map(|p| p.info.pid)
        .ok_or_else(|| BoxError::NoSuchProcess {
            name: shared.name.clone(),
            target,
        })?;
    drop(procs);
    let ctl = lock(&shared.box_).as_ref().map(|g| g.ctl.clone());
    if let Some(ctl) = ctl {
        ipc::send(&*ctl, &ToInit::Signal { pid, signal }, &[])
            .map_err(|e| BoxError::Supervisor(e.to_string()))?;
    }
    reply(conn, &Reply::Ok, &[]);
    Ok(())
}
