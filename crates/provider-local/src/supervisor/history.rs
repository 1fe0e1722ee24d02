//! The box's history as the supervisor keeps it: auto-capture after commands and while
//! background processes write, checkout (killing the processes, or restoring under them).

use super::*;

/// Commit the box if something not ignored changed; the node gets `message` and `command`.
/// Every attempt's outcome is recorded for `status`; a failure is logged once (until an
/// attempt succeeds again).
/// With `freeze`, the box's processes are frozen while the node is taken (once the
/// operations lock is held: a checkout holding it restarts the box, which must not be frozen).
/// `prestaged`: copies made while a batch command ran (see [`super::prestager`]), offered
/// to the commit when still valid. `at_end`: the capture at the end of a foreground command,
/// which may stop a quiet box to hand its layer over (see [`super::quiet`]).
pub(super) fn auto_capture(
    shared: &Shared,
    message: &str,
    command: Option<&str>,
    freeze: bool,
    prestaged: Option<super::prestager::Prestaged>,
    at_end: bool,
) -> Result<Option<String>> {
    let result = try_auto_capture(shared, message, command, freeze, prestaged, at_end);
    let mut health = lock(&shared.capture);
    match &result {
        Ok(_) => {
            if health.failure.is_some() {
                eprintln!("auto-capture: working again");
            }
            health.record(Ok(()));
        }
        Err(e) => {
            let text = e.to_string();
            if health.failure.as_deref() != Some(text.as_str()) {
                eprintln!("auto-capture: capturing the changes ({message}) failed: {text}");
            }
            health.record(Err(text));
        }
    }
    result
}

pub(super) fn try_auto_capture(
    shared: &Shared,
    message: &str,
    command: Option<&str>,
    freeze: bool,
    prestaged: Option<super::prestager::Prestaged>,
    at_end: bool,
) -> Result<Option<String>> {
    let _ops = lock(&shared.ops);
    let _frozen = freeze.then(|| shared.freeze()).flatten();
    let mut timer = agentbox_core::timing::Timer::start("auto-capture");
    let version = shared.store.marks_version(&shared.name)?;
    let snap = snapshot(shared, version);
    timer.lap(&match &snap.hint {
        Some(h) => format!("the watcher's journal ({} paths)", h.paths.len()),
        None => "no journal to trust".to_owned(),
    });
    // Offered until the commit below is done (the copies not taken are deleted then).
    let _offer = prestaged.and_then(|p| offer(shared, p));
    if let Some(o) = &_offer {
        timer.lap(&format!("prestaged copies offered: {}", o.left()));
    }
    let (changed, differ) = changed_since_head(shared, snap.hint.as_ref())?;
    if !changed {
        shared.watch.settled(&snap, version, &differ);
        return Ok(None);
    }
    let opts = CommitOpts {
        message: message.to_owned(),
        command: command.map(str::to_owned),
        metadata: git_metadata(shared),
    };
    let quiet = if at_end && _offer.is_none() {
        super::quiet::commit_quiet(shared, opts.clone(), &mut timer)
    } else {
        None
    };
    let node = match quiet {
        Some(node) => node?,
        None => shared.store.commit(&shared.name, opts)?,
    };
    // The commit took what the check saw (or looked at everything again).
    let after = shared.store.marks_version(&shared.name).ok().flatten();
    shared.watch.settled(&snap, after, &[]);
    after_node(shared);
    // Automatic nodes accumulate: thin old ones (stable positions; tags, branch points and
    // the newest `keep` stay). Only once the history is longer than what is kept anyway.
    let keep = shared
        .rec
        .keep
        .unwrap_or(agentbox_boxes::config::keys::DEFAULT_KEEP);
    if node.seq > keep {
        if let Err(e) = shared.store.retain(&shared.name, keep) {
            eprintln!("retention after an automatic node failed: {e}");
        }
    }
    Ok(Some(node.id.into_string()))
}

/// Whether the box's tree differs from HEAD in a path that is not ignored.
///
/// The upper directory's marks say which entries were touched since the last commit, in one
/// `lstat` each. When only directories were touched, that is not proof of a change:
/// overlayfs writes its own attributes on a merged directory (`overlay.origin`,
/// `overlay.impure`) the first time the box looks into it after a restart on a new lower,
/// which moves the directory's ctime. Those cases are settled by comparing the tree with
/// HEAD's, so such a restart makes no node.
/// Also returns every path that differs from the last commit's marks (for the watcher's
/// journal, which keeps them until a commit takes them). With `hint`, only the hinted
/// paths are looked at (see [`crate::layer_watch`]).
pub(super) fn changed_since_head(
    shared: &Shared,
    hint: Option<&agentbox_store::ChangeHint>,
) -> Result<(bool, Vec<PathBuf>)> {
    let ignore = record::ignore_set(&shared.rec);
    let changed = shared.store.changed_paths_hinted(&shared.name, hint)?;
    let differ: Vec<PathBuf> = changed.iter().map(|(p, _)| p.clone()).collect();
    let shown = lock(&shared.shown).clone();
    // A set, not a search of `changed` per path: a box may have made a hundred thousand
    // directories, and this runs under the operations lock that `stop` waits for.
    let dirs: std::collections::HashSet<&Path> = changed
        .iter()
        .filter(|(_, dir)| *dir)
        .map(|(p, _)| p.as_path())
        .collect();
    let is_dir = |p: &Path| dirs.contains(p);
    let counted: Vec<PathBuf> = record::counted_changes(&ignore, &changed)
        .into_iter()
        .filter(|p| !(is_dir(p) && holds_shown(&shown, p)))
        .collect();
    if counted.is_empty() {
        return Ok((false, differ));
    }
    if !counted.iter().all(|p| is_dir(p)) {
        return Ok((true, differ));
    }
    let head = shared.store.resolve(&shared.name, "HEAD")?;
    let any = shared
        .store
        .diff(&shared.name, &head, None)?
        .iter()
        .any(|c| {
            let mount_point = c.kind == agentbox_store::fsops::diff::ChangeKind::Added
                && c.new_size.is_none()
                && holds_shown(&shown, &c.path);
            !ignore.is_ignored(&c.path) && !mount_point
        });
    Ok((any, differ))
}

/// Offer to the next commit the copies of `p` that are still exact: no event on their
/// paths (or the directories above) since they were made, and not held open or mapped by
/// a box process (a write through a shared mapping raises no event). `None` when that
/// cannot be told (the tap broke, the held files cannot be listed): nothing is offered.
fn offer(
    shared: &Shared,
    p: super::prestager::Prestaged,
) -> Option<agentbox_store::backend::prestage::Offer> {
    let valid = shared.watch.end_tap(&p.tap, p.prestage.copies())?;
    let held: std::collections::HashSet<PathBuf> = held_files(shared)?.into_iter().collect();
    Some(
        p.prestage
            .offer(|rel, _| valid.contains(rel) && !held.contains(rel)),
    )
}

/// The watcher's journal as a hint for a check against marks `version`, with the files
/// the box's processes hold (see [`crate::layer_watch`]).
fn snapshot(
    shared: &Shared,
    version: Option<agentbox_store::MarksVersion>,
) -> crate::layer_watch::Snapshot {
    let upper = lock(&shared.box_)
        .as_ref()
        .map(|g| g.upper.clone())
        .unwrap_or_default();
    shared
        .watch
        .snapshot(&upper, version, || held_files(shared))
}

/// See [`crate::capture::Capturer::held_files`].
fn held_files(shared: &Shared) -> Option<Vec<PathBuf>> {
    let pid1 = lock(&shared.box_).as_ref().map(|g| g.running.pid1_host)?;
    crate::held_files::held_paths(pid1)
}

/// Whether directory `dir` (relative to the box's root) is, or is above, a path shown from
/// the host (`home/alice` for `/home/alice/.cargo`). A rootless box's start makes those
/// directories in its layer, as the shown paths' mount points and upper directories: that
/// is the box starting, not a change of the box's. What is below a shown path counts.
fn holds_shown(shown: &[PathBuf], dir: &Path) -> bool {
    shown
        .iter()
        .any(|s| s.strip_prefix("/").unwrap_or(s).starts_with(dir))
}

pub(super) fn checkout(shared: &Arc<Shared>, conn: &OwnedFd, reference: &str) -> Result<()> {
    let _ops = lock(&shared.ops);
    // Resolve first: a bad reference must not kill anything.
    shared.store.resolve(&shared.name, reference)?;
    let killed = kill_box(shared, true);
    let result = shared.store.checkout(&shared.name, reference);
    // Whatever happened, the box runs again (on the old tree if the checkout failed).
    let restarted = restart_box(shared);
    let node = result?;
    restarted?;
    // The box's repository came back with the tree: its branch moved with it.
    after_node(shared);
    reply(
        conn,
        &Reply::Node {
            node: Some(node.id.into_string()),
            killed,
        },
        &[],
    );
    Ok(())
}

impl crate::capture::Capturer for Shared {
    fn layer_dir(&self) -> Option<(u64, PathBuf)> {
        lock(&self.box_)
            .as_ref()
            .map(|g| (g.number, g.upper.clone()))
    }

    fn capture(&self) -> std::result::Result<bool, String> {
        use super::foreground::Decision;
        // Label the node with what was running: background processes first (they are the
        // usual authors of unattended changes), else the foreground commands.
        let (background, label) = {
            let procs = lock(&self.procs);
            // Sessions run unattended too.
            let background = |k: ProcKind| matches!(k, ProcKind::Spawn | ProcKind::Session);
            let mut spawned = procs.values().filter(|p| background(p.info.kind));
            let mut others = procs.values().filter(|p| !background(p.info.kind));
            match (spawned.next(), others.next()) {
                (Some(p), _) => (
                    true,
                    format!(
                        "auto: while {} ran{}",
                        agentbox_boxes::types::render_command(&p.info.argv),
                        match spawned.count() {
                            0 => String::new(),
                            n => format!(" (and {n} more)"),
                        }
                    ),
                ),
                (None, Some(p)) => (
                    false,
                    format!(
                        "auto: during {}",
                        agentbox_boxes::types::render_command(&p.info.argv)
                    ),
                ),
                (None, None) => (false, "auto: changes".to_owned()),
            }
        };
        let running = match self
            .foreground
            .decide(std::time::Instant::now(), background)
        {
            Decision::Hold => return Ok(false),
            Decision::Capture { running } => running,
        };
        let label = match &running {
            Some(r) => format!("{label} ({r})"),
            None => label,
        };
        // A command still running keeps writing: the node is taken with the box frozen, so it
        // is the box at one instant, not files copied across seconds of writes.
        auto_capture(self, &label, None, running.is_some(), None, false)
            .map(|_| true)
            .map_err(|e| e.to_string())
    }

    fn forgets(&self) -> u64 {
        self.foreground.forgets()
    }

    fn alive(&self) -> bool {
        !self.stopping.load(Ordering::SeqCst)
    }

    fn report(&self, health: &crate::capture::CaptureHealth) {
        lock(&self.capture).update_watcher(health);
    }

    fn watch(&self) -> &crate::layer_watch::LayerWatch {
        &self.watch
    }

    fn held_files(&self) -> Option<Vec<PathBuf>> {
        held_files(self)
    }
}

/// `checkout --keep-processes`: make the running box's tree that of `reference` by writing
/// the differences through the box's root, then record the result as a new node (a child of
/// HEAD, with the reference's tree). The processes keep running and see the change.
pub(super) fn restore_in_place(
    shared: &Arc<Shared>,
    conn: &OwnedFd,
    reference: &str,
) -> Result<()> {
    use agentbox_store::fsops::diff::ChangeKind;
    let _ops = lock(&shared.ops);
    let target = shared
        .store
        .node(&shared.store.resolve(&shared.name, reference)?)?;
    let tree = shared.store.node_tree(&target)?;
    // From the target to the working tree: what to undo.
    let changes = shared.store.diff(&shared.name, &target.id, None)?;
    let pid1 = lock(&shared.box_)
        .as_ref()
        .map(|g| g.running.pid1_host)
        .ok_or_else(|| BoxError::Supervisor("the box is restarting; try again".into()))?;
    let ids = agentbox_sandbox::idmap::of_process(pid1);
    // Writes through the box's root are made as box root where its layers are idmapped
    // (as host root they could not be mapped); only this thread, only until the node.
    let acting = ids
        .map(agentbox_sandbox::idmap::ActingAsBoxRoot::start)
        .transpose()
        .map_err(BoxError::Supervisor)?;
    let root = crate::restore::BoxRoot::of_pid(pid1, ids)?;
    let failed =
        |path: &std::path::Path, e: std::io::Error| BoxError::io(&PathBuf::from("/").join(path), e);
    // Paths only in the working tree go, deepest first.
    for c in changes.iter().rev().filter(|c| c.kind == ChangeKind::Added) {
        root.remove(&c.path).map_err(|e| failed(&c.path, e))?;
    }
    // The rest takes the target's entry, parents first.
    let mut dirs = Vec::new();
    for c in changes.iter().filter(|c| c.kind != ChangeKind::Added) {
        let Some(e) = tree.entries.get(&c.path) else {
            continue;
        };
        root.put(&c.path, &e.src, &e.meta)
            .map_err(|err| failed(&c.path, err))?;
        if let Some(parent) = c.path.parent() {
            dirs.push(parent.to_owned());
        }
        if e.meta.kind == agentbox_store::fsops::Kind::Dir {
            dirs.push(c.path.clone());
        }
    }
    dirs.sort();
    dirs.dedup();
    for d in dirs.iter().rev() {
        if let Some(e) = tree.entries.get(d) {
            root.settle_dir(d, &e.meta).map_err(|err| failed(d, err))?;
        }
    }
    drop(acting);
    let node = shared.store.commit(
        &shared.name,
        CommitOpts {
            message: format!(
                "restored {} (processes kept)",
                &target.id[..12.min(target.id.len())]
            ),
            command: None,
            metadata: git_metadata(shared),
        },
    )?;
    after_node(shared);
    reply(
        conn,
        &Reply::Node {
            node: Some(node.id.into_string()),
            killed: 0,
        },
        &[],
    );
    Ok(())
}

impl Shared {
    /// Freeze the box's processes until the guard drops, when the box has a cgroup that can
    /// (a failure is logged: the node is then taken while the box runs, as before).
    fn freeze(&self) -> Option<agentbox_boxes::cgroup::Frozen> {
        let cgroup =
            agentbox_boxes::cgroup::BoxCgroup::open(&record::cgroup_name(&self.home, &self.name))
                .ok()
                .flatten()?;
        cgroup
            .frozen()
            .map_err(|e| eprintln!("auto-capture: cannot freeze the box for a node: {e}"))
            .ok()
    }
}
