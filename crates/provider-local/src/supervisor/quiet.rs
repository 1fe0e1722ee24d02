//! Capture of a quiet box by handing its working layer over instead of copying it.
//!
//! Why: the node at the end of a batch command (`npm install`, `pip install`) copied what
//! the command wrote into the store (bytes on ext4): ~0.5–0.8 s for pip's ~5,000 files, the
//! last of what made a box slower than the host on real installs. When the command was the
//! only thing running in the box, nothing needs the box's overlay once it ended: the box is
//! stopped, its upper directory becomes the new layer by one rename
//! ([`agentbox_store::Store::commit_stopped_box`]), and the box starts again over the new
//! node with a fresh upper directory — what a checkout does, without killing anything.
//!
//! When that is allowed ([`take_quiet_generation`], all under the box's generation lock, so
//! no command can start meanwhile: see [`super::procs::start_process`]):
//! * the command was the only foreground command, no tracked process runs, none is being
//!   started, and PID 1 is the only process of the box's PID namespace (a daemon the
//!   command left behind keeps the copy path: it may be writing);
//! * the box's private in-memory mounts (`/tmp`, `/run`, `/dev/shm`) hold exactly what they
//!   held when the generation started (blocks and inodes used, by `statvfs`): a restart
//!   gives them back empty, so a box whose commands left files there keeps the copy path.
//!   Known gap: a file of those mounts rewritten in place at the same size, or a System V
//!   IPC object, would not survive the restart (neither does it a checkout).
//!
//! `AGENTBOX_QUIET_HANDOFF=0` in the supervisor's environment turns it off (the copy path
//! always), for measuring the two against each other.

use super::*;

/// `statvfs` use of each of the box's private in-memory mounts: (blocks used, inodes used).
pub(super) type ScratchMarks = Vec<(u64, u64)>;

/// The in-memory mounts whose contents a restart loses.
const SCRATCH: [&str; 3] = ["/tmp", "/run", "/dev/shm"];

/// Whether the handoff of a quiet box is on (see the module documentation): on the
/// `layers` backend, whose commit of a stopped box renames the upper directory. (On btrfs
/// the commit of a stopped box reflinks as that of a running one: stopping would gain
/// nothing there yet.) Not for a rootless box: its supervisor may not clear the overlay's
/// trusted attributes of the upper directory that the layer must not keep.
pub(super) fn enabled(kind: agentbox_store::backend::BackendKind, rootless: bool) -> bool {
    kind == agentbox_store::backend::BackendKind::Layers
        && !rootless
        && std::env::var_os("AGENTBOX_QUIET_HANDOFF").is_none_or(|v| v != "0")
}

/// The use of the box's private in-memory mounts, seen through PID 1's root (`statvfs`
/// only, as [`super::generation::scratch_use`]); `None` when one cannot be read.
pub(super) fn scratch_marks(pid1: i32) -> Option<ScratchMarks> {
    SCRATCH
        .iter()
        .map(|inside| {
            let st = rustix::fs::statvfs(format!("/proc/{pid1}/root{inside}")).ok()?;
            Some((
                st.f_blocks.saturating_sub(st.f_bfree),
                st.f_files.saturating_sub(st.f_ffree),
            ))
        })
        .collect()
}

/// Whether nothing but the one foreground command that just ended has run or is running in
/// the box (see the module documentation), judged without stopping anything.
pub(super) fn is_quiet(shared: &Shared, gen: &Generation) -> bool {
    shared.foreground.count() <= 1
        && lock(&shared.procs).is_empty()
        && lock(&shared.pending).is_empty()
        && gen.scratch.is_some()
        && pid1_alone(gen.running.pid1_host)
        && scratch_marks(gen.running.pid1_host) == gen.scratch
}

/// Whether the box's PID 1 has no child: every other process of the box descends from it
/// (an orphan is reparented to it, or to a subreaper that descends from it), so then it
/// is alone in the box. One read per thread of PID 1, where listing the box's processes
/// reads every host process's namespace (~1,200 `readlink`s on a busy host). A kernel
/// without `/proc/PID/task/TID/children` (`CONFIG_PROC_CHILDREN`) gets that listing.
fn pid1_alone(pid1: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid1}/task")) else {
        return false;
    };
    let mut any = false;
    for task in tasks {
        let Ok(task) = task else { return false };
        match std::fs::read_to_string(task.path().join("children")) {
            Ok(children) if children.trim().is_empty() => any = true,
            Ok(_) => return false,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !any => {
                return crate::held_files::box_pids(pid1).is_some_and(|pids| pids == [pid1]);
            }
            Err(_) => return false,
        }
    }
    any
}

/// The running generation, taken out of `shared` (so no command starts in it), when the
/// box is quiet; `None` (and the box untouched) otherwise.
fn take_quiet_generation(shared: &Shared) -> Option<Generation> {
    let mut box_ = lock(&shared.box_);
    if !box_.as_ref().is_some_and(|g| is_quiet(shared, g)) {
        return None;
    }
    box_.take()
}

/// Commit the quiet box by handing its layer over: stop it, commit, start it again over
/// the new node. `None` when the box is not quiet (the caller copies instead, the box
/// untouched). The box runs again afterwards whatever happened; a failed restart is the
/// error then.
pub(super) fn commit_quiet(
    shared: &Shared,
    opts: CommitOpts,
    timer: &mut agentbox_core::timing::Timer,
) -> Option<Result<agentbox_store::Node>> {
    if !shared.quiet_handoff {
        return None;
    }
    let mut gen = take_quiet_generation(shared)?;
    timer.lap("quiet box");
    // Gone with its PID 1: its mount namespace, and with it the overlay.
    gen.running.kill();
    if let Some(p) = gen.pasta.as_mut() {
        p.kill();
    }
    // The shared watcher watches the directory about to become the layer: its journal
    // must never hint a check of the fresh one (see `crate::layer_watch`). The capture
    // loop builds a new watcher once the box runs again.
    shared.watch.clear();
    timer.lap("stop");
    let node = shared.store.commit_stopped_box(&shared.name, opts);
    timer.lap("commit (handoff)");
    let restarted = restart_box(shared);
    timer.lap("start");
    Some(match (node, restarted) {
        (Ok(node), Ok(())) => Ok(node),
        (Err(e), _) => Err(e.into()),
        (Ok(_), Err(e)) => Err(e),
    })
}
