//! The box's generations: starting the box (its spec, cgroup, network helper), restarting
//! it for a checkout, killing it, and the events its PID 1 sends (started, exited).

use super::*;
use agentbox_boxes::hostview::HostView;

/// Start the box (a new generation: its PID 1 and, on a private network, its `pasta`).
/// Runs on the main thread, which the box's launcher and `pasta` die with.
pub(super) fn start_box(shared: &Arc<Shared>) -> Result<()> {
    // Before anything runs: a missing `pasta` or a taken port is the user's to fix.
    let pasta_bin = match shared.rec.network {
        Network::Private => {
            let bin = agentbox_sandbox::net::preflight(
                &format!("box {:?}", shared.name),
                shared.rec.rootless,
            )?;
            agentbox_sandbox::net::check_ports(&shared.name, &shared.rec.publish)?;
            Some(bin)
        }
        _ => None,
    };
    let layers = shared.store.box_layers(&shared.name)?;
    let upper = layers.upper.clone();
    fs_err::create_dir_all(shared.dirs.scratch())?;
    let (base, view) = match &shared.rec.image {
        // An image has its own homes and tools: nothing of the host's is shown.
        Some(image) => (
            agentbox_boxes::records::images::rootfs(&shared.home, image),
            HostView::default(),
        ),
        None => {
            let mut view = agentbox_boxes::hostview::host_view_scanned(
                &shared.home,
                &shared.rec.host_inputs(),
                &mut lock(&shared.unreadable),
            );
            if shared.rec.rootless {
                // A rootless box has its own /root and /home (the host's are never bound).
                view.hide
                    .retain(|p| p != Path::new("/root") && p != Path::new("/home"));
            }
            (PathBuf::from("/"), view)
        }
    };
    // The tree the box's layers are mounted over decides which of their whiteouts hide
    // something (see `EnvState::box_base`). Only for later commits: while it cannot be recorded
    // (a commit holds the environment), every whiteout is kept, as before.
    let box_base = agentbox_store::backend::BoxBase {
        root: base.clone(),
        hidden: view.hide.clone(),
        shown: view.show.clone(),
    };
    if let Err(e) = shared.store.record_box_base(&shared.name, &box_base) {
        eprintln!("recording the box's base: {e}");
    }
    // The directories the box's start makes for the shown paths are no change of the box's
    // (see `history::changed_since_head`).
    *lock(&shared.shown) = view.show.clone();
    *lock(&shared.tool_env) = view.env.clone();
    write_npmrc(&shared.dirs.inbox(), view.npmrc.as_ref())?;
    let mut binds = vec![
        Bind {
            src: shared.exe.clone(),
            dst: PathBuf::from(BOX_BINARY),
            readonly: true,
        },
        // git runs `git-remote-agentbox` for the box repositories' remotes (`agentbox::NAME`).
        Bind {
            src: shared.exe.clone(),
            dst: PathBuf::from(record::REMOTE_HELPER),
            readonly: true,
        },
        Bind {
            src: shared.dirs.inbox(),
            dst: PathBuf::from(agentbox_boxes::types::INBOX_DIR),
            readonly: true,
        },
    ];
    // No copy of the agents' configuration is shared between boxes (each keeps its own in
    // its home: see `agents::sync`), so nothing of the home is bound writable.
    // What the binary needs to run on any base (an image may lack its libraries).
    for (src, name) in record::box_binary_libs().unwrap_or_default() {
        binds.push(Bind {
            src: src.clone(),
            dst: PathBuf::from(record::BOX_LIB_DIR).join(name),
            readonly: true,
        });
    }
    for git in &shared.rec.repos {
        // Each repository's objects, shared read-only: the box's own repository borrows
        // them.
        binds.push(Bind {
            src: git.objects.clone(),
            dst: git.box_objects.clone(),
            readonly: true,
        });
    }
    let spec = BoxSpec {
        hostname: shared.name.clone(),
        base,
        lowers: layers.lowers,
        upper: layers.upper,
        workdir: layers.workdir,
        scratch: shared.dirs.scratch(),
        hide: view.hide,
        show: view.show,
        network: shared.rec.network,
        binds,
        rootless: shared.rec.rootless,
        ids: (!shared.rec.rootless).then(agentbox_sandbox::proto::IdRange::for_root_boxes),
        tmpfs: agentbox_sandbox::proto::TmpfsSizes::for_memory(
            shared.rec.limits.memory_bytes,
            host_ram(),
        ),
    };
    let log = fs_err::OpenOptions::new()
        .create(true)
        .append(true)
        .open(shared.dirs.supervisor_log())?
        .into_parts()
        .0;
    let cgroup = box_cgroup(shared)?;
    let running = launch(&shared.exe, &spec, Some(log), |pid| match &cgroup {
        Some(cg) => cg.add(pid).map_err(|e| e.to_string()),
        None => Ok(()),
    })
    .map_err(|e| BoxError::Sandbox {
        name: shared.name.clone(),
        message: e.to_string(),
    })?;
    let ctl = Arc::new(
        running
            .ctl
            .try_clone()
            .map_err(|e| BoxError::io(&shared.dirs.dir, e))?,
    );
    let pasta = match &pasta_bin {
        Some(bin) => match Pasta::attach(
            bin,
            &shared.name,
            running.launcher.id(),
            shared.rec.rootless,
            &shared.rec.publish,
            &shared.dirs.pasta_log(),
        ) {
            Ok(p) => Some(p),
            Err(e) => {
                running.kill();
                return Err(e.into());
            }
        },
        None => None,
    };
    let number = shared.generation.fetch_add(1, Ordering::SeqCst) + 1;
    let running_pid1 = running.pid1_host;
    {
        let shared = shared.clone();
        let ctl = ctl.clone();
        std::thread::spawn(move || read_events(shared, ctl, number));
    }
    *lock(&shared.box_) = Some(Generation {
        running,
        pasta,
        ctl,
        number,
        upper,
        scratch: quiet::scratch_marks(running_pid1),
    });
    broker::on_start(shared);
    Ok(())
}

/// How full the running box's private tmpfs mounts are, seen through its PID 1's root
/// (`statvfs` only: nothing of the box is read or followed beyond the mount points, which
/// the box cannot replace without mount rights).
pub(super) fn scratch_use(shared: &Shared) -> Vec<ScratchUse> {
    let Some(pid1) = lock(&shared.box_).as_ref().map(|g| g.running.pid1_host) else {
        return Vec::new();
    };
    ["/tmp", "/run", "/dev/shm"]
        .iter()
        .filter_map(|inside| {
            let at = PathBuf::from(format!("/proc/{pid1}/root{inside}"));
            let st = rustix::fs::statvfs(&at).ok()?;
            let block = st.f_frsize;
            Some(ScratchUse {
                path: (*inside).to_owned(),
                used_bytes: st.f_blocks.saturating_sub(st.f_bfree) * block,
                size_bytes: st.f_blocks * block,
            })
        })
        .collect()
}

/// The host's RAM in bytes (0 when the kernel does not say).
pub(super) fn host_ram() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let kib = m.lines().find_map(|l| l.strip_prefix("MemTotal:"))?;
            kib.trim().trim_end_matches("kB").trim().parse::<u64>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}

/// The process limit of a box whose owner set none (`--pids`, `box.pids` raise or lower
/// it): a fork bomb in a box stops there instead of exhausting the host's PIDs.
pub const DEFAULT_PIDS: u64 = 4096;

/// The box's cgroup, with its limits applied — and, where the owner set no process limit,
/// [`DEFAULT_PIDS`] (only where the machine can enforce it: a default never keeps a box
/// from starting). `None` where cgroups are unavailable and no limit was asked for (a limit
/// that was asked for and cannot be enforced is an error, never ignored).
pub(super) fn box_cgroup(shared: &Shared) -> Result<Option<agentbox_boxes::cgroup::BoxCgroup>> {
    let name = record::cgroup_name(&shared.home, &shared.name);
    let asked = &shared.rec.limits;
    if asked.pids.is_none() {
        let mut with_default = asked.clone();
        with_default.pids = Some(DEFAULT_PIDS);
        if let Ok(cg) = agentbox_boxes::cgroup::BoxCgroup::create(&name, &with_default) {
            shared.pids_limit.store(DEFAULT_PIDS, Ordering::SeqCst);
            return Ok(Some(cg));
        }
    }
    shared
        .pids_limit
        .store(asked.pids.unwrap_or(0), Ordering::SeqCst);
    match agentbox_boxes::cgroup::BoxCgroup::create(&name, asked) {
        Ok(cg) => Ok(Some(cg)),
        Err(e) if e.is_unavailable() => Ok(None),
        Err(e) => Err(BoxError::Sandbox {
            name: shared.name.clone(),
            message: e.to_string(),
        }),
    }
}

/// Remove the box's cgroup (after its processes are gone).
pub fn remove_cgroup(home: &Home, name: &str) {
    match agentbox_boxes::cgroup::BoxCgroup::open(&record::cgroup_name(home, name)) {
        Ok(Some(cg)) => {
            if let Err(e) = cg.remove() {
                eprintln!("removing the box's cgroup: {e}");
            }
        }
        Ok(None) => {}
        Err(e) => eprintln!("finding the box's cgroup: {e}"),
    }
}

/// Ask the main thread to start the box again, and wait.
pub(super) fn restart_box(shared: &Shared) -> Result<()> {
    let (tx, rx) = channel();
    lock(&shared.launch_tx)
        .send(tx)
        .map_err(|_| BoxError::Supervisor("the supervisor is shutting down".into()))?;
    rx.recv()
        .map_err(|_| BoxError::Supervisor("the supervisor is shutting down".into()))?
}

/// Kill every process of the box (and the box's PID 1); tell their waiters. Returns how many
/// tracked processes were running.
pub(super) fn kill_box(shared: &Shared, by_checkout: bool) -> usize {
    let gen = lock(&shared.box_).take();
    let procs = std::mem::take(&mut *lock(&shared.procs));
    if let Some(mut g) = gen {
        g.running.kill();
        // After the box: its published ports close once nothing in it can answer.
        if let Some(p) = g.pasta.as_mut() {
            p.kill();
        }
    }
    let n = procs.len();
    for (_, p) in procs {
        let note = ExitNote {
            status: 128 + libc::SIGKILL,
            by_checkout,
        };
        note_exit(shared, p.info, note);
        if let Some(tx) = p.exit_tx {
            let _ = tx.send(note);
        }
    }
    n
}

/// Remember how a background process ended, for `ps` (foreground commands told their
/// caller already). The oldest beyond [`RECENT_EXITS`] is forgotten.
pub(super) fn note_exit(shared: &Shared, mut info: ProcInfo, note: ExitNote) {
    if info.kind != ProcKind::Spawn {
        return;
    }
    info.exit = Some(ProcExit {
        status: note.status,
        ended: Utc::now(),
        killed_by_checkout: note.by_checkout,
        output: first_lines(&shared.dirs.log(info.id), EXIT_OUTPUT_LINES),
    });
    let mut exited = lock(&shared.exited);
    exited.push_back(info);
    while exited.len() > RECENT_EXITS {
        exited.pop_front();
    }
}

/// The first `n` lines of the file at `path` (a process's log), each cut to a line's
/// worth of characters; none when it cannot be read. Only its start is read: a log can be
/// large.
pub(super) fn first_lines(path: &Path, n: usize) -> Vec<String> {
    use std::io::Read;
    let mut head = Vec::new();
    let read = fs_err::File::open(path).and_then(|f| {
        f.take(agentbox_boxes::types::EXIT_OUTPUT_HEAD as u64)
            .read_to_end(&mut head)
    });
    if read.is_err() {
        return Vec::new();
    }
    agentbox_boxes::types::output_lines(&head, n)
}

pub(super) fn read_events(shared: Arc<Shared>, ctl: Arc<OwnedFd>, number: u64) {
    loop {
        match ipc::recv::<FromInit>(&*ctl) {
            Ok((FromInit::Started { id, pid }, fds)) => {
                if let Some(p) = lock(&shared.pending).remove(&id) {
                    let mut info = p.info;
                    info.pid = pid;
                    lock(&shared.procs).insert(
                        pid,
                        ProcEntry {
                            info,
                            exit_tx: p.exit_tx,
                        },
                    );
                    let _ = p.started.send(Ok((pid, fds)));
                }
            }
            Ok((FromInit::Failed { id, error, status }, _)) => {
                if let Some(p) = lock(&shared.pending).remove(&id) {
                    let _ = p.started.send(Err((error, status)));
                }
            }
            Ok((FromInit::Exited { pid, code, signal }, _)) => {
                let ended = lock(&shared.procs).remove(&pid);
                if let Some(p) = ended {
                    let note = ExitNote {
                        status: FromInit::status(code, signal),
                        by_checkout: false,
                    };
                    // Before the waiter hears of it: a `ps` after `spawn` reports the
                    // exit shows it.
                    note_exit(&shared, p.info, note);
                    if let Some(tx) = p.exit_tx {
                        let _ = tx.send(note);
                    }
                }
            }
            Ok(_) => {}
            Err(ipc::IpcError::Malformed(e)) => eprintln!("ignoring a malformed event: {e}"),
            Err(_) => {
                // PID 1 is gone. Unless this generation was replaced on purpose, the box died
                // under us (killed from outside): end the supervisor so the next command
                // starts a fresh one.
                let current = lock(&shared.box_).as_ref().map(|g| g.number);
                if current == Some(number) {
                    eprintln!("the box's PID 1 ended unexpectedly; supervisor exits");
                    shutdown(&shared, agentbox_core::timing::Timer::start("shutdown"));
                }
                return;
            }
        }
    }
}

/// The host user's `~/.npmrc` without its credentials, into the box's inbox (read-only in
/// the box, where `npm_config_globalconfig` names it), or no such file when there is none.
/// Written whole under another name first: a running box's npm never reads half of it.
fn write_npmrc(inbox: &Path, npmrc: Option<&agentbox_boxes::hostview::Npmrc>) -> Result<()> {
    let at = inbox.join(agentbox_boxes::hostview::NPMRC_FILE);
    let Some(npmrc) = npmrc else {
        match fs_err::remove_file(&at) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
            _ => return Ok(()),
        }
    };
    if !npmrc.dropped.is_empty() {
        // Key names only, never values; in the supervisor's log.
        eprintln!(
            "~/.npmrc: left out of the box (credentials or settings not known to be safe): {}",
            npmrc.dropped.join(", ")
        );
    }
    fs_err::create_dir_all(inbox)?;
    let tmp = inbox.join(format!(".{}.tmp", agentbox_boxes::hostview::NPMRC_FILE));
    fs_err::write(&tmp, &npmrc.text)?;
    fs_err::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
    fs_err::rename(&tmp, &at)?;
    Ok(())
}
