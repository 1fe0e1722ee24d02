//! The fixture's slots (one network namespace, veth pair and lock file per concurrent
//! test process) and the removal of whatever a slot holds, a killed run's leftovers included.

use super::*;

pub(super) fn netns_name(slot: u8) -> String {
    format!("agentbox-rd{slot}")
}

pub(super) fn veth_names(slot: u8) -> (String, String) {
    (format!("abrd{slot}h"), format!("abrd{slot}n"))
}

pub(super) fn lock_path(slot: u8) -> PathBuf {
    std::env::temp_dir().join(format!("agentbox-remote-docker-{slot}.lock"))
}

/// The first free slot, locked; what a killed run left in it is removed first.
pub(super) fn take_slot() -> (u8, fs_err::File) {
    for slot in 0..SLOTS {
        let path = lock_path(slot);
        let file = fs_err::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .expect("slot lock file");
        if file.file().try_lock().is_ok() {
            let left = fs_err::read_to_string(&path).unwrap_or_default();
            let left = (!left.is_empty()).then(|| PathBuf::from(left));
            remove_slot(slot, left.as_deref());
            return (slot, file);
        }
    }
    panic!("all {SLOTS} remote engine fixture slots are taken");
}

/// Kill every process in slot `slot`'s namespace, delete the namespace and the veth, and
/// remove directory `dir` (unmounting what is mounted below it first). Idempotent.
pub(super) fn remove_slot(slot: u8, dir: Option<&Path>) {
    let ns = netns_name(slot);
    if Path::new("/run/netns").join(&ns).exists() {
        // Processes can fork while being killed: repeat until none is left.
        for _ in 0..100 {
            let out = Command::new("ip")
                .args(["netns", "pids", &ns])
                .output()
                .expect("ip netns pids");
            let in_ns: Vec<u32> = String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect();
            if in_ns.is_empty() {
                break;
            }
            // A container's processes are in namespaces of their own, below the shims
            // of this one: killed with them (the engine, when it could still stop, has
            // stopped them already).
            for pid in with_descendants(&in_ns) {
                signal(pid, rustix::process::Signal::KILL);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = Command::new("ip").args(["netns", "del", &ns]).status();
        // `ip netns add` made /run/netns a mount of its own; the last namespace out
        // takes it away again.
        let empty = std::fs::read_dir("/run/netns").is_ok_and(|mut d| d.next().is_none());
        if empty {
            let _ = rustix::mount::unmount("/run/netns", rustix::mount::UnmountFlags::DETACH);
        }
    }
    let (h, _) = veth_names(slot);
    let _ = Command::new("ip")
        .args(["link", "del", &h])
        .stderr(Stdio::null())
        .status();
    if let Some(dir) = dir.filter(|d| d.exists()) {
        remove_cgroups(&dir.join("data/containers"));
        crate::unmount_below(dir);
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The cgroups of the containers whose state is in `containers` (one directory per id):
/// an engine that was killed leaves them behind. A cgroup goes once its processes are gone,
/// which takes a moment after they were killed.
pub(super) fn remove_cgroups(containers: &Path) {
    let Ok(ids) = std::fs::read_dir(containers) else {
        return;
    };
    let ids: Vec<String> = ids
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    let root = Path::new("/sys/fs/cgroup");
    // cgroup v1 has a hierarchy per controller, v2 one; the engine's cgroupfs driver uses
    // `docker/ID`, its systemd driver `system.slice/docker-ID.scope`.
    let mut hierarchies = vec![root.to_owned()];
    if let Ok(d) = std::fs::read_dir(root) {
        hierarchies.extend(d.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
    }
    for id in &ids {
        for h in &hierarchies {
            for cg in [
                h.join("docker").join(id),
                h.join("system.slice").join(format!("docker-{id}.scope")),
            ] {
                for _ in 0..50 {
                    if !cg.exists() || std::fs::remove_dir(&cg).is_ok() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
}

/// `roots` and every process below them.
pub(super) fn with_descendants(roots: &[u32]) -> Vec<u32> {
    let mut parent_of = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if let Some(ppid) = ppid {
                parent_of.push((pid, ppid));
            }
        }
    }
    let mut all: Vec<u32> = roots.to_vec();
    let mut i = 0;
    while i < all.len() {
        let p = all[i];
        let children: Vec<u32> = parent_of
            .iter()
            .filter(|(c, pp)| *pp == p && !all.contains(c))
            .map(|(c, _)| *c)
            .collect();
        all.extend(children);
        i += 1;
    }
    all
}

pub(super) fn signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

/// Run `program args`, panicking with its output when it fails.
pub(super) fn run(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

pub(super) fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}
