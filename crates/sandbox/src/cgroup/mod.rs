//! Per-box cgroups: resource limits, and a handle on every process of a box.
//!
//! A box's cgroup is the directory `<parent>/agentbox/<name>` in each cgroup hierarchy it uses,
//! where `<parent>` is the hierarchy's mount point, or the cgroup named by
//! `$AGENTBOX_CGROUP_PARENT` (a path relative to the hierarchy root, for a cgroup delegated to
//! a non-root user).
//!
//! Two layouts are supported, detected from `/proc/self/mountinfo`:
//!
//! * **v1** (legacy or hybrid): each controller has its own hierarchy. A box always lives in the
//!   `pids` and `freezer` hierarchies (when mounted), so its processes can be listed and
//!   frozen without any limit, plus `memory` and `cpu` when those limits are asked for. Every
//!   process of the box is in the box's directory of every one of these hierarchies.
//! * **v2** (unified): one directory holds everything; controllers are enabled for it through
//!   the `cgroup.subtree_control` files of its ancestors.
//!
//! A machine is treated as v1 when any of the `memory`, `pids` or `cpu` controllers is bound to
//! a v1 hierarchy: a controller can be bound to only one hierarchy, so on a hybrid machine the
//! unified mount has none of them.
//!
//! One file (over 600 lines): [`BoxCgroup`] is one handle whose operations (create or adopt, add, limit,
//! freeze, kill, remove) keep one invariant across both layouts — every process of the box
//! is in every one of its groups; the layouts, limits, files and errors are the modules
//! below.

use std::io::{self, Write as _};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

mod error;
mod files;
mod layout;
mod limits;
mod v1;
mod v2;

pub use self::error::CgroupError;
pub use self::limits::Limits;
use self::{error::*, files::*, layout::*, limits::*, v1::*, v2::*};

/// Environment variable naming the cgroup (relative to each hierarchy's root) under which
/// `agentbox/<name>` is created. Unset: the hierarchy root.
pub const PARENT_ENV: &str = "AGENTBOX_CGROUP_PARENT";

/// The directory grouping all boxes under the parent cgroup.
const GROUP_DIR: &str = "agentbox";

/// CFS period for cpu limits, in microseconds (the kernel default).
const CPU_PERIOD_US: u64 = 100_000;

/// The smallest CFS quota the kernel accepts, in microseconds.
const CPU_MIN_QUOTA_US: u64 = 1_000;

/// v1 reports "no memory limit" as a huge page-aligned number; anything at or above this is
/// treated as unlimited when reading limits back.
const V1_MEMORY_UNLIMITED: u64 = 1 << 62;

/// Rounds of kill-and-check in [`BoxCgroup::kill_all`] before giving up.
const KILL_ROUNDS: u32 = 100;

/// Rounds of rmdir in [`BoxCgroup::remove`] while the kernel still finishes tearing down exited
/// processes.
const RMDIR_ROUNDS: u32 = 100;

/// The controllers this module uses. `Freezer` is a v1 hierarchy; on v2 freezing is built into
/// every cgroup (`cgroup.freeze`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Controller {
    Memory,
    Pids,
    Cpu,
    Freezer,
}

impl Controller {
    const ALL: [Controller; 4] = [
        Controller::Memory,
        Controller::Pids,
        Controller::Cpu,
        Controller::Freezer,
    ];

    fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Pids => "pids",
            Controller::Cpu => "cpu",
            Controller::Freezer => "freezer",
        }
    }

    fn from_name(s: &str) -> Option<Controller> {
        Controller::ALL.into_iter().find(|c| c.name() == s)
    }

    fn needed_for(self) -> &'static str {
        match self {
            Controller::Memory => "memory limits",
            Controller::Pids => "pids limits",
            Controller::Cpu => "cpu limits",
            Controller::Freezer => "stopping every process of a box at once",
        }
    }
}

/// The controllers whose limits `limits` asks for.
fn requested(limits: &Limits) -> Vec<Controller> {
    let mut out = Vec::new();
    if limits.memory_bytes.is_some() {
        out.push(Controller::Memory);
    }
    if limits.pids.is_some() {
        out.push(Controller::Pids);
    }
    if limits.cpus.is_some() {
        out.push(Controller::Cpu);
    }
    out
}

/// Check a box name: 1–128 characters of `[A-Za-z0-9._-]`, starting with a letter or digit (so
/// it is never `.`/`..` and never a path).
fn validate_name(name: &str) -> Result<(), CgroupError> {
    let bad = |reason: &str| {
        Err(CgroupError::InvalidName {
            name: name.to_owned(),
            reason: reason.to_owned(),
        })
    };
    if name.is_empty() || name.len() > 128 {
        return bad("must have 1 to 128 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return bad("may contain only letters, digits, '.', '_' and '-'");
    }
    if !name.as_bytes()[0].is_ascii_alphanumeric() {
        return bad("must start with a letter or a digit");
    }
    Ok(())
}

/// One directory of the box: in v1, one per hierarchy; in v2 the only one.
#[derive(Debug, Clone, PartialEq)]
struct Group {
    path: PathBuf,
    /// The controllers of interest bound to this hierarchy (v1); all of them on v2.
    controllers: Vec<Controller>,
}

impl Group {
    fn has(&self, c: Controller) -> bool {
        self.controllers.contains(&c)
    }
}

/// A box's cgroup: its directory in every hierarchy it uses.
///
/// Invariants: `groups` is non-empty; on v2 it has exactly one entry; on v1 the hierarchies are
/// distinct. A process added with [`BoxCgroup::add`] is in every one of them, and so are its
/// descendants forked afterwards.
#[derive(Debug, Clone, PartialEq)]
pub struct BoxCgroup {
    name: String,
    version: u8,
    groups: Vec<Group>,
}

impl BoxCgroup {
    /// Create (or adopt if it exists) the cgroup `agentbox/<name>` under each needed hierarchy
    /// and apply limits.
    ///
    /// Adopting applies `limits` as the whole truth: a limit that is `None` is reset to
    /// unlimited in any hierarchy the box already has. Processes already in the box are moved
    /// into hierarchies this call adds. When the cgroup root is not writable, the error is
    /// [`CgroupError::Unavailable`] for empty limits (run without a cgroup) and
    /// [`CgroupError::CannotLimit`] otherwise.
    pub fn create(name: &str, limits: &Limits) -> Result<BoxCgroup, CgroupError> {
        validate_name(name)?;
        limits.validate()?;
        let layout = match Layout::detect() {
            Ok(Some(layout)) => layout,
            Ok(None) => {
                return Err(cannot_create(
                    limits,
                    Path::new("/sys/fs/cgroup"),
                    "no cgroup filesystem is mounted".into(),
                ))
            }
            Err(e) if limits.is_empty() => {
                return Err(CgroupError::Unavailable {
                    path: PathBuf::from("/proc/self/mountinfo"),
                    reason: e.to_string(),
                })
            }
            Err(e) => return Err(e),
        };
        let parent = parent_from_env()?;
        match layout {
            Layout::V1 { ref mounts } => create_v1(name, limits, &layout, mounts, &parent),
            Layout::V2 { ref mount } => create_v2(name, limits, mount, &parent),
        }
    }

    /// The existing cgroup of box `name`, if any (`None` also when no cgroup is mounted).
    pub fn open(name: &str) -> Result<Option<BoxCgroup>, CgroupError> {
        validate_name(name)?;
        let Some(layout) = Layout::detect()? else {
            return Ok(None);
        };
        let parent = parent_from_env()?;
        let (version, groups) = match &layout {
            Layout::V1 { mounts } => (
                1,
                v1_groups(mounts)
                    .into_iter()
                    .map(|(mount, controllers)| Group {
                        path: box_dir(&mount, &parent, name),
                        controllers,
                    })
                    .filter(|g| is_dir(&g.path))
                    .collect::<Vec<_>>(),
            ),
            Layout::V2 { mount } => (
                2,
                Some(Group {
                    path: box_dir(mount, &parent, name),
                    controllers: Controller::ALL.to_vec(),
                })
                .filter(|g| is_dir(&g.path))
                .into_iter()
                .collect(),
            ),
        };
        if groups.is_empty() {
            return Ok(None);
        }
        Ok(Some(BoxCgroup {
            name: name.to_owned(),
            version,
            groups,
        }))
    }

    /// Names of every box cgroup that exists (in any hierarchy), sorted.
    pub fn names() -> Result<Vec<String>, CgroupError> {
        let Some(layout) = Layout::detect()? else {
            return Ok(Vec::new());
        };
        let parent = parent_from_env()?;
        let roots: Vec<PathBuf> = match &layout {
            Layout::V1 { mounts } => v1_groups(mounts)
                .into_iter()
                .map(|(mount, _)| under(&mount, &parent).join(GROUP_DIR))
                .collect(),
            Layout::V2 { mount } => vec![under(mount, &parent).join(GROUP_DIR)],
        };
        let mut names: Vec<String> = roots
            .iter()
            .filter_map(|r| std::fs::read_dir(r).ok())
            .flat_map(|d| d.flatten())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// Move process `pid` (with all its threads) into the box, in every hierarchy. Its
    /// children forked afterwards follow it; children it already has stay where they are. On
    /// error the process may already be in some of the box's hierarchies; [`BoxCgroup::pids`]
    /// and [`BoxCgroup::kill_all`] still find it, since they look in every one.
    pub fn add(&self, pid: u32) -> Result<(), CgroupError> {
        for g in &self.groups {
            let procs = g.path.join("cgroup.procs");
            write_raw(&procs, &pid.to_string()).map_err(|e| {
                let hint = if !process_exists(pid) {
                    format!("process {pid} does not exist; it may have exited")
                } else if is_permission(&e) {
                    "moving a process needs write access to this file and to cgroup.procs of \
                     the closest cgroup containing both its current cgroup and this one; run as \
                     root or start agentbox inside the delegated cgroup"
                        .to_owned()
                } else {
                    String::new()
                };
                CgroupError::io_hint(
                    format!("moving process {pid} into box {}", self.name),
                    &procs,
                    e,
                    hint,
                )
            })?;
        }
        Ok(())
    }

    /// Every process inside the box (and any cgroup nested in it), sorted, without duplicates.
    /// A box whose cgroup is gone has none.
    pub fn pids(&self) -> Result<Vec<u32>, CgroupError> {
        let mut out = Vec::new();
        for g in &self.groups {
            collect_procs(&g.path, &mut out)?;
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// SIGKILL every process inside the box and return once none is left.
    ///
    /// v2 with `cgroup.kill` kills the whole subtree atomically. Otherwise the box is frozen
    /// (so nothing forks between listing and killing), every listed process is sent SIGKILL,
    /// and the box is thawed so the killed processes can die; this repeats until the box is
    /// empty, for a bounded number of rounds ([`CgroupError::NotEmpty`] after that). The
    /// caller must not be inside the box ([`CgroupError::ContainsSelf`]).
    pub fn kill_all(&self) -> Result<(), CgroupError> {
        self.kill_all_with(true)
    }

    /// [`BoxCgroup::kill_all`], using `cgroup.kill` only when `use_kill_file` (so the freezer
    /// path can be exercised on kernels that have both).
    fn kill_all_with(&self, use_kill_file: bool) -> Result<(), CgroupError> {
        let me = std::process::id();
        for round in 0..KILL_ROUNDS {
            let pids = self.pids()?;
            if pids.is_empty() {
                return Ok(());
            }
            if pids.contains(&me) {
                return Err(CgroupError::ContainsSelf {
                    path: self.primary().to_owned(),
                    pid: me,
                });
            }
            let kill_file = self.primary().join("cgroup.kill");
            if use_kill_file && self.version == 2 && kill_file.exists() {
                write_file(&kill_file, "1", "killing every process of the box", "")?;
            } else {
                self.freeze(true)?;
                // A listed process may exit and its pid be reused before the signal; the box is
                // frozen, so only a process already exiting can do that, which keeps the window
                // as small as v1 allows.
                let killed = self.kill_listed();
                let thawed = self.freeze(false);
                killed?;
                thawed?;
            }
            std::thread::sleep(backoff(round));
        }
        let pids = self.pids()?;
        if pids.is_empty() {
            return Ok(());
        }
        Err(CgroupError::NotEmpty {
            path: self.primary().to_owned(),
            pids,
            rounds: KILL_ROUNDS,
        })
    }

    /// Kill the processes listed now (the box being frozen, the list is complete).
    fn kill_listed(&self) -> Result<(), CgroupError> {
        for pid in self.pids()? {
            let Ok(raw) = i32::try_from(pid) else {
                continue;
            };
            let Some(p) = rustix::process::Pid::from_raw(raw) else {
                continue;
            };
            match rustix::process::kill_process(p, rustix::process::Signal::KILL) {
                Ok(()) | Err(rustix::io::Errno::SRCH) => {}
                Err(e) => {
                    return Err(CgroupError::io_hint(
                        format!("sending SIGKILL to process {pid} of box {}", self.name),
                        self.primary(),
                        e.into(),
                        "run as root or as the owner of the box's processes".into(),
                    ))
                }
            }
        }
        Ok(())
    }

    /// Freeze the box's processes until the returned guard drops (which thaws them), when the
    /// kernel can: for a snapshot of the box at one instant while it runs.
    pub fn frozen(&self) -> Result<Frozen, CgroupError> {
        self.freeze(true)?;
        Ok(Frozen(self.clone()))
    }

    /// Freeze (`true`) or thaw the box, when the kernel can. Freezing waits a bounded time for
    /// the box to be frozen and goes on regardless: a process in uninterruptible IO delays
    /// freezing, and killing without a complete freeze still makes progress.
    fn freeze(&self, frozen: bool) -> Result<(), CgroupError> {
        let (file, value, state_file) = if self.version == 2 {
            let dir = self.primary();
            (
                dir.join("cgroup.freeze"),
                if frozen { "1" } else { "0" },
                dir.join("cgroup.events"),
            )
        } else {
            let Some(g) = self.groups.iter().find(|g| g.has(Controller::Freezer)) else {
                return Ok(());
            };
            (
                g.path.join("freezer.state"),
                if frozen { "FROZEN" } else { "THAWED" },
                g.path.join("freezer.state"),
            )
        };
        match write_raw(&file, value) {
            Ok(()) => {}
            // Old v2 kernels have no freezer; a vanished box needs no freezing.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                return Err(CgroupError::io(
                    if frozen {
                        "freezing the box"
                    } else {
                        "thawing the box"
                    },
                    &file,
                    e,
                ))
            }
        }
        if frozen {
            for round in 0..20 {
                let state = fs_err::read_to_string(&state_file).unwrap_or_default();
                let done = if self.version == 2 {
                    state.lines().any(|l| l.trim() == "frozen 1")
                } else {
                    state.trim() == "FROZEN"
                };
                if done {
                    break;
                }
                std::thread::sleep(backoff(round));
            }
        }
        Ok(())
    }

    /// Kill everything inside, then remove the box's directory in every hierarchy. A box whose
    /// directories are already gone is removed without error.
    pub fn remove(self) -> Result<(), CgroupError> {
        self.kill_all()?;
        for g in &self.groups {
            remove_tree(&g.path)?;
        }
        Ok(())
    }

    /// The cgroup version in use: 1 or 2.
    pub fn version(&self) -> u8 {
        self.version
    }

    /// The box name this cgroup belongs to.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The box's cgroup directories: one per hierarchy on v1, one on v2.
    pub fn dirs(&self) -> Vec<&Path> {
        self.groups.iter().map(|g| g.path.as_path()).collect()
    }

    /// The limits currently applied, read back from the kernel. The memory limit is as the
    /// kernel stores it (rounded down to whole pages).
    pub fn limits(&self) -> Result<Limits, CgroupError> {
        let mut limits = Limits::default();
        for g in &self.groups {
            let dir = &g.path;
            if self.version == 2 {
                limits.memory_bytes = read_v2_max(&dir.join("memory.max"))?;
                limits.pids = read_v2_max(&dir.join("pids.max"))?;
                let cpu_max = dir.join("cpu.max");
                if cpu_max.exists() {
                    let text = read_file(&cpu_max)?;
                    let mut it = text.split_whitespace();
                    let quota = it.next().and_then(|q| q.parse::<u64>().ok());
                    let period = it.next().and_then(|p| p.parse::<u64>().ok());
                    if let (Some(q), Some(p)) = (quota, period) {
                        limits.cpus = Some(q as f64 / p as f64);
                    }
                }
                continue;
            }
            if g.has(Controller::Memory) {
                let v = read_number(&dir.join("memory.limit_in_bytes"))?;
                limits.memory_bytes = v.filter(|&v| v < V1_MEMORY_UNLIMITED);
            }
            if g.has(Controller::Pids) {
                limits.pids = read_v2_max(&dir.join("pids.max"))?;
            }
            if g.has(Controller::Cpu) {
                let quota = read_file(&dir.join("cpu.cfs_quota_us"))?;
                let period = read_number(&dir.join("cpu.cfs_period_us"))?;
                if let (Ok(q), Some(p)) = (quota.trim().parse::<i64>(), period) {
                    if q > 0 && p > 0 {
                        limits.cpus = Some(q as f64 / p as f64);
                    }
                }
            }
        }
        Ok(limits)
    }

    /// How many processes of the box the kernel's OOM killer has killed for its memory
    /// limit since the cgroup was made (`oom_kill` of `memory.events` on v2, of
    /// `memory.oom_control` on v1). `None` when the box has no memory controller or the
    /// kernel does not count them.
    pub fn oom_kills(&self) -> Option<u64> {
        let file = if self.version == 2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        let dir = self.groups.iter().find(|g| g.has(Controller::Memory))?;
        let text = read_file(&dir.path.join(file)).ok()?;
        oom_kill_count(&text)
    }

    /// The directory used in messages: the pids hierarchy's on v1 (the one that always has
    /// every process), the only one on v2.
    fn primary(&self) -> &Path {
        self.groups
            .iter()
            .find(|g| g.has(Controller::Pids))
            .or(self.groups.first())
            .map(|g| g.path.as_path())
            .unwrap_or_else(|| Path::new("/sys/fs/cgroup"))
    }
}

/// The `oom_kill N` line of a `memory.events` or `memory.oom_control` file.
fn oom_kill_count(text: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        (f.next() == Some("oom_kill"))
            .then(|| f.next()?.parse().ok())
            .flatten()
    })
}

/// A size for messages, to one decimal in the largest fitting binary unit (`64.0 MiB`).
pub fn size_text(b: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if b >= 1 << shift {
            return format!("{:.1} {unit}", b as f64 / (1u64 << shift) as f64);
        }
    }
    format!("{b} bytes")
}

/// The parent cgroup's directory in the hierarchy mounted at `mount` (`parent` is relative;
/// empty for the root, which then gets no trailing separator in messages).
fn under(mount: &Path, parent: &Path) -> PathBuf {
    if parent.as_os_str().is_empty() {
        mount.to_owned()
    } else {
        mount.join(parent)
    }
}

/// `<mount>/<parent>/agentbox/<name>`.
fn box_dir(mount: &Path, parent: &Path, name: &str) -> PathBuf {
    under(mount, parent).join(GROUP_DIR).join(name)
}

/// Return the box, or on error remove the directories this call created (they hold no limits
/// worth keeping and at most processes that were just moved, which the rmdir then refuses).
fn finish(
    name: &str,
    version: u8,
    groups: Vec<Group>,
    created: Vec<PathBuf>,
    result: Result<(), CgroupError>,
) -> Result<BoxCgroup, CgroupError> {
    match result {
        Ok(()) => {
            let cg = BoxCgroup {
                name: name.to_owned(),
                version,
                groups,
            };
            // A crash between freezing and thawing in kill_all leaves the box frozen, and any
            // process added to it would then hang; an adopted box always starts thawed.
            cg.freeze(false)?;
            Ok(cg)
        }
        Err(e) => {
            for dir in created.iter().rev() {
                let _ = fs_err::remove_dir(dir);
            }
            Err(e)
        }
    }
}

/// Check that boxes can get cgroups with every kind of limit here. The error says what is
/// missing: no cgroup filesystem, a controller not mounted or not enabled, or a cgroup root this
/// user may not write.
pub fn available() -> Result<(), CgroupError> {
    let Some(layout) = Layout::detect()? else {
        return Err(CgroupError::Unavailable {
            path: PathBuf::from("/sys/fs/cgroup"),
            reason: "no cgroup filesystem is mounted (mount cgroup2 on /sys/fs/cgroup)".into(),
        });
    };
    let parent = parent_from_env()?;
    let bases: Vec<PathBuf> = match &layout {
        Layout::V1 { mounts } => {
            for c in Controller::ALL {
                if layout.mount_of(c).is_none() {
                    return Err(CgroupError::ControllerMissing {
                        controller: c.name(),
                        needed_for: c.needed_for(),
                        path: layout.any_mount(),
                        hint: format!("mount its hierarchy, e.g. `mkdir -p /sys/fs/cgroup/{0} && mount -t cgroup -o {0} cgroup /sys/fs/cgroup/{0}`", c.name()),
                    });
                }
            }
            v1_groups(mounts)
                .into_iter()
                .map(|(m, _)| under(&m, &parent))
                .collect()
        }
        Layout::V2 { mount } => {
            let base = under(mount, &parent);
            if !is_dir(&base) {
                return Err(missing_parent(&parent, &base));
            }
            let offered = v2_controller_list(&base.join("cgroup.controllers"))?;
            for c in [Controller::Memory, Controller::Pids, Controller::Cpu] {
                if !offered.iter().any(|o| o == c.name()) {
                    return Err(CgroupError::ControllerMissing {
                        controller: c.name(),
                        needed_for: c.needed_for(),
                        path: base,
                        hint: "enable it in cgroup.subtree_control of every ancestor (with systemd: Delegate=yes)".into(),
                    });
                }
            }
            vec![base]
        }
    };
    for base in bases {
        if !is_dir(&base) {
            return Err(missing_parent(&parent, &base));
        }
        if let Err(e) = rustix::fs::access(&base, rustix::fs::Access::WRITE_OK) {
            return Err(CgroupError::Unavailable {
                path: base,
                reason: format!(
                    "this user may not create cgroups here ({}); run agentbox as root, or \
                     delegate a cgroup to this user and set {PARENT_ENV} to it",
                    io::Error::from(e)
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;

/// A frozen box (see [`BoxCgroup::frozen`]); thawed when dropped.
pub struct Frozen(BoxCgroup);

impl Drop for Frozen {
    fn drop(&mut self) {
        // A box left frozen hangs every command in it: try hard.
        for round in 0..5 {
            match self.0.freeze(false) {
                Ok(()) => return,
                Err(e) => {
                    eprintln!("thawing box {}: {e}", self.0.name);
                    std::thread::sleep(backoff(round));
                }
            }
        }
    }
}
