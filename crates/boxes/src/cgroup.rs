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

use std::io::{self, Write as _};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

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

/// Errors of cgroup management. Each variant names the path involved and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// No cgroup could be made, and none was strictly needed (no limits were requested). A
    /// caller may treat this as "run the box without a cgroup". [`BoxCgroup::create`] returns
    /// it only for empty limits.
    #[error("no usable cgroup at {path}: {reason}")]
    Unavailable { path: PathBuf, reason: String },
    /// Limits were requested but no cgroup can be made for them.
    #[error(
        "cannot apply the resource limits ({limits}): {reason} ({path}); run agentbox as root, \
         or delegate a cgroup to this user and set {PARENT_ENV} to its path relative to the \
         cgroup root"
    )]
    CannotLimit {
        path: PathBuf,
        reason: String,
        limits: String,
    },
    /// A controller needed for `needed_for` is missing.
    #[error("the {controller} cgroup controller is not available at {path} (needed for {needed_for}): {hint}")]
    ControllerMissing {
        controller: &'static str,
        needed_for: &'static str,
        path: PathBuf,
        hint: String,
    },
    /// A limit value that cannot be applied.
    #[error("invalid {what} {value:?}: {reason}")]
    InvalidLimit {
        what: &'static str,
        value: String,
        reason: String,
    },
    /// A box name that cannot be a cgroup directory name.
    #[error("invalid box cgroup name {name:?}: {reason}")]
    InvalidName { name: String, reason: String },
    /// `$AGENTBOX_CGROUP_PARENT` is unusable.
    #[error("{PARENT_ENV}={value:?} ({path}): {reason}")]
    InvalidParent {
        value: String,
        path: PathBuf,
        reason: String,
    },
    /// An IO operation on a cgroup file failed; `source` (from `fs_err`) names the file.
    #[error("{what}: {source}{}", hint_suffix(.hint))]
    Io {
        what: String,
        path: PathBuf,
        #[source]
        source: io::Error,
        hint: String,
    },
    /// Processes survived every round of SIGKILL.
    #[error(
        "processes {pids:?} are still in {path} after {rounds} rounds of SIGKILL; they are \
         probably stuck in uninterruptible IO (state D in /proc/PID/status): retry once that IO \
         completes"
    )]
    NotEmpty {
        path: PathBuf,
        pids: Vec<u32>,
        rounds: u32,
    },
    /// The calling process is inside the cgroup it was asked to kill.
    #[error("refusing to kill every process in {path}: this process ({pid}) is one of them; kill the box from a process outside it")]
    ContainsSelf { path: PathBuf, pid: u32 },
}

fn hint_suffix(hint: &str) -> String {
    if hint.is_empty() {
        String::new()
    } else {
        format!(" ({hint})")
    }
}

impl CgroupError {
    /// True for [`CgroupError::Unavailable`]: the box can run without a cgroup.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, CgroupError::Unavailable { .. })
    }

    fn io(what: impl Into<String>, path: &Path, source: io::Error) -> Self {
        CgroupError::Io {
            what: what.into(),
            path: path.to_owned(),
            source,
            hint: String::new(),
        }
    }

    fn io_hint(what: impl Into<String>, path: &Path, source: io::Error, hint: String) -> Self {
        CgroupError::Io {
            what: what.into(),
            path: path.to_owned(),
            source,
            hint,
        }
    }
}

/// Resource limits of a box. `None` means unlimited.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Limits {
    /// Memory (RAM and swap together) in bytes; exceeding it OOM-kills a process of the box.
    pub memory_bytes: Option<u64>,
    /// Maximum number of processes and threads; a fork beyond it fails with EAGAIN.
    pub pids: Option<u64>,
    /// CPU time as a number of cores, e.g. `1.5`; enforced per 100 ms period.
    pub cpus: Option<f64>,
}

impl Limits {
    /// True when no limit is set.
    pub fn is_empty(&self) -> bool {
        self.memory_bytes.is_none() && self.pids.is_none() && self.cpus.is_none()
    }

    /// Parse a memory size: a number of bytes, or a number (fractions allowed) followed by a
    /// binary unit `K`, `M`, `G` or `T` (case-insensitive, optionally followed by `B` or
    /// `iB`): `"1048576"`, `"512M"`, `"1.5G"`, `"2GiB"`. The result is rounded down to whole
    /// bytes and must be positive.
    pub fn parse_memory(s: &str) -> Result<u64, CgroupError> {
        let invalid = |reason: &str| CgroupError::InvalidLimit {
            what: "memory size",
            value: s.to_owned(),
            reason: reason.to_owned(),
        };
        let t = s.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (number, unit) = t.split_at(split);
        let shift =
            match unit.trim_start().to_ascii_lowercase().as_str() {
                "" | "b" => 0,
                "k" | "kb" | "kib" => 10,
                "m" | "mb" | "mib" => 20,
                "g" | "gb" | "gib" => 30,
                "t" | "tb" | "tib" => 40,
                _ => return Err(invalid(
                    "expected a number of bytes, or a number with K, M, G or T (e.g. 512M, 1.5G)",
                )),
            };
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() {
            return Err(invalid("expected a number (e.g. 512M, 1.5G)"));
        }
        if fraction.contains('.') {
            return Err(invalid("more than one decimal point"));
        }
        if shift == 0 && !fraction.is_empty() {
            return Err(invalid("a number of bytes must be whole"));
        }
        let too_big = || invalid("too large");
        let multiplier = 1u128 << shift;
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| too_big())?
        };
        // Exact arithmetic: the fraction is digits / 10^len of the unit; at most 18 digits keep
        // 10^len and the products well inside u128.
        let fraction = &fraction[..fraction.len().min(18)];
        let frac_bytes = if fraction.is_empty() {
            0
        } else {
            let digits: u128 = fraction.parse().map_err(|_| invalid("bad fraction"))?;
            digits * multiplier / 10u128.pow(fraction.len() as u32)
        };
        let bytes = whole
            .checked_mul(multiplier)
            .and_then(|b| b.checked_add(frac_bytes))
            .ok_or_else(too_big)?;
        let bytes = u64::try_from(bytes).map_err(|_| too_big())?;
        if bytes == 0 {
            return Err(invalid("a memory limit must be more than 0 bytes"));
        }
        Ok(bytes)
    }

    /// Check that every set limit can be applied: memory and pids at least 1, cpus a finite
    /// number of at least 0.01 (the kernel's smallest quota is 1 ms per 100 ms period).
    pub fn validate(&self) -> Result<(), CgroupError> {
        if self.memory_bytes == Some(0) {
            return Err(CgroupError::InvalidLimit {
                what: "memory limit",
                value: "0".into(),
                reason: "must be more than 0 bytes".into(),
            });
        }
        if self.pids == Some(0) {
            return Err(CgroupError::InvalidLimit {
                what: "pids limit",
                value: "0".into(),
                reason: "must be at least 1 (the box's first process counts)".into(),
            });
        }
        if let Some(cpus) = self.cpus {
            cpu_quota_us(cpus)?;
        }
        Ok(())
    }

    /// A short human description, e.g. `memory 32 MiB, pids 10, cpus 1.5`.
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(m) = self.memory_bytes {
            parts.push(format!("memory {}", human_bytes(m)));
        }
        if let Some(p) = self.pids {
            parts.push(format!("pids {p}"));
        }
        if let Some(c) = self.cpus {
            parts.push(format!("cpus {c}"));
        }
        parts.join(", ")
    }
}

fn human_bytes(b: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if b >= 1 << shift && b.is_multiple_of(1 << shift) {
            return format!("{} {unit}", b >> shift);
        }
    }
    format!("{b} bytes")
}

/// The CFS quota for `cpus` cores at the fixed period.
fn cpu_quota_us(cpus: f64) -> Result<u64, CgroupError> {
    let invalid = |reason: &str| CgroupError::InvalidLimit {
        what: "cpu limit",
        value: cpus.to_string(),
        reason: reason.to_owned(),
    };
    if !cpus.is_finite() || cpus <= 0.0 {
        return Err(invalid("must be a positive number of cores, e.g. 1.5"));
    }
    let quota = (cpus * CPU_PERIOD_US as f64).round();
    if quota < CPU_MIN_QUOTA_US as f64 {
        return Err(invalid(
            "must be at least 0.01 cores (the kernel's smallest quota)",
        ));
    }
    if quota >= u64::MAX as f64 {
        return Err(invalid("too large"));
    }
    Ok(quota as u64)
}

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

/// One line of `/proc/self/mountinfo`, the fields this module needs.
#[derive(Debug, Clone, PartialEq)]
struct MountEntry {
    /// The path inside the filesystem that is mounted (for cgroups: the cgroup shown at the
    /// mount point).
    root: String,
    mount_point: PathBuf,
    fstype: String,
    super_options: Vec<String>,
}

/// Parse mountinfo text, keeping only cgroup (v1 and v2) mounts. Malformed lines are skipped:
/// the kernel writes this file, and a line we cannot read is a line we cannot use anyway.
fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let left: Vec<&str> = left.split(' ').collect();
        let right: Vec<&str> = right.split(' ').collect();
        if left.len() < 5 || right.len() < 3 {
            continue;
        }
        let fstype = right[0];
        if fstype != "cgroup" && fstype != "cgroup2" {
            continue;
        }
        out.push(MountEntry {
            root: agentbox_store::mounts::unescape(left[3]),
            mount_point: PathBuf::from(agentbox_store::mounts::unescape(left[4])),
            fstype: fstype.to_owned(),
            super_options: right[2].split(',').map(str::to_owned).collect(),
        });
    }
    out
}

/// Where the cgroup hierarchies this module uses are mounted.
#[derive(Debug, Clone, PartialEq)]
enum Layout {
    /// One mount point per controller; two controllers may share one (e.g. `cpu,cpuacct`).
    V1 { mounts: Vec<(Controller, PathBuf)> },
    /// The unified hierarchy's mount point.
    V2 { mount: PathBuf },
}

impl Layout {
    /// Pick the layout from the cgroup mounts, or `None` when no usable cgroup is mounted.
    /// When a hierarchy is mounted more than once, the mount showing its root wins.
    fn from_mounts(entries: &[MountEntry]) -> Option<Layout> {
        let mut ordered: Vec<&MountEntry> = entries.iter().filter(|e| e.root == "/").collect();
        ordered.extend(entries.iter().filter(|e| e.root != "/"));
        let mut mounts: Vec<(Controller, PathBuf)> = Vec::new();
        for e in ordered.iter().filter(|e| e.fstype == "cgroup") {
            for opt in &e.super_options {
                if let Some(c) = Controller::from_name(opt) {
                    if !mounts.iter().any(|(m, _)| *m == c) {
                        mounts.push((c, e.mount_point.clone()));
                    }
                }
            }
        }
        let v1_has_limits = mounts
            .iter()
            .any(|(c, _)| matches!(c, Controller::Memory | Controller::Pids | Controller::Cpu));
        if v1_has_limits {
            return Some(Layout::V1 { mounts });
        }
        ordered
            .iter()
            .find(|e| e.fstype == "cgroup2")
            .map(|e| Layout::V2 {
                mount: e.mount_point.clone(),
            })
    }

    fn detect() -> Result<Option<Layout>, CgroupError> {
        let path = Path::new("/proc/self/mountinfo");
        let text = fs_err::read_to_string(path).map_err(|e| {
            CgroupError::io_hint(
                "reading the mount table",
                path,
                e,
                "is /proc mounted?".into(),
            )
        })?;
        Ok(Layout::from_mounts(&parse_mountinfo(&text)))
    }

    fn mount_of(&self, c: Controller) -> Option<&Path> {
        match self {
            Layout::V1 { mounts } => mounts
                .iter()
                .find(|(m, _)| *m == c)
                .map(|(_, p)| p.as_path()),
            Layout::V2 { mount } => Some(mount),
        }
    }

    /// Any mount point, for error messages.
    fn any_mount(&self) -> PathBuf {
        match self {
            Layout::V1 { mounts } => mounts
                .first()
                .map(|(_, p)| p.clone())
                .unwrap_or_else(|| PathBuf::from("/sys/fs/cgroup")),
            Layout::V2 { mount } => mount.clone(),
        }
    }
}

/// The parent cgroup from `$AGENTBOX_CGROUP_PARENT`, as a relative path (empty: the root).
fn parent_from_env() -> Result<PathBuf, CgroupError> {
    let Some(value) = std::env::var_os(PARENT_ENV) else {
        return Ok(PathBuf::new());
    };
    let value_str = value.to_string_lossy().into_owned();
    let mut out = PathBuf::new();
    for comp in Path::new(&value).components() {
        match comp {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(CgroupError::InvalidParent {
                    value: value_str.clone(),
                    path: PathBuf::from(&value),
                    reason: "must be a cgroup path without `..`, e.g. /user.slice/user-1000.slice/user@1000.service/agentbox.slice".into(),
                })
            }
        }
    }
    Ok(out)
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

/// The error for "a cgroup directory cannot be created here". Invariant: `Unavailable` only when
/// no limit was requested, so a caller may always treat `Unavailable` as "no cgroup".
fn cannot_create(limits: &Limits, path: &Path, reason: String) -> CgroupError {
    if limits.is_empty() {
        CgroupError::Unavailable {
            path: path.to_owned(),
            reason: format!(
                "{reason}; the box runs without a cgroup (to give it one: run agentbox as root, \
                 or delegate a cgroup to this user and set {PARENT_ENV})"
            ),
        }
    } else {
        CgroupError::CannotLimit {
            path: path.to_owned(),
            reason,
            limits: limits.describe(),
        }
    }
}

/// Whether an IO error means "this user may not do this here".
fn is_permission(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem
    )
}

fn read_file(path: &Path) -> Result<String, CgroupError> {
    fs_err::read_to_string(path).map_err(|e| CgroupError::io("reading a cgroup file", path, e))
}

/// Write `value` to a cgroup control file in a single `write(2)`, as the kernel requires.
fn write_raw(path: &Path, value: &str) -> io::Result<()> {
    let mut f = fs_err::OpenOptions::new().write(true).open(path)?;
    f.write_all(value.as_bytes())
}

fn write_file(path: &Path, value: &str, what: &str, hint: &str) -> Result<(), CgroupError> {
    write_raw(path, value).map_err(|e| {
        CgroupError::io_hint(
            format!("{what} (writing {:?})", value.trim()),
            path,
            e,
            hint.to_owned(),
        )
    })
}

fn is_dir(path: &Path) -> bool {
    path.symlink_metadata().map(|m| m.is_dir()).unwrap_or(false)
}

/// Make `dir` if missing. Returns whether this call made it.
fn ensure_dir(dir: &Path, limits: &Limits) -> Result<bool, CgroupError> {
    match fs_err::create_dir(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            if is_dir(dir) {
                Ok(false)
            } else {
                Err(CgroupError::InvalidName {
                    name: dir
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    reason: format!("{} exists and is a cgroup control file", dir.display()),
                })
            }
        }
        Err(e) if is_permission(&e) => Err(cannot_create(
            limits,
            dir,
            format!("this user may not create cgroups here ({})", e.kind()),
        )),
        Err(e) => Err(CgroupError::io("creating a cgroup", dir, e)),
    }
}

/// All process ids in `dir` and its descendant cgroups. A cgroup that no longer exists has no
/// processes.
fn collect_procs(dir: &Path, out: &mut Vec<u32>) -> Result<(), CgroupError> {
    let procs = dir.join("cgroup.procs");
    match fs_err::read_to_string(&procs) {
        Ok(text) => out.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(CgroupError::io(
                "listing the processes of a cgroup",
                &procs,
                e,
            ))
        }
    }
    for sub in sub_cgroups(dir)? {
        collect_procs(&sub, out)?;
    }
    Ok(())
}

/// The child cgroups of `dir` (none if `dir` is gone).
fn sub_cgroups(dir: &Path) -> Result<Vec<PathBuf>, CgroupError> {
    let entries = match fs_err::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(CgroupError::io("listing a cgroup", dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| CgroupError::io("listing a cgroup", dir, e))?;
        if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            out.push(entry.path());
        }
    }
    Ok(out)
}

/// Remove `dir` and its descendant cgroups (which must have no processes). Tolerates `dir`
/// being gone. Retries while the kernel reports the cgroup busy: right after SIGKILL, exiting
/// processes may still be accounted to it.
fn remove_tree(dir: &Path) -> Result<(), CgroupError> {
    for sub in sub_cgroups(dir)? {
        remove_tree(&sub)?;
    }
    let mut round = 0;
    loop {
        match fs_err::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::ResourceBusy && round < RMDIR_ROUNDS => {
                round += 1;
                std::thread::sleep(backoff(round));
            }
            Err(e) => {
                return Err(CgroupError::io_hint(
                    "removing a cgroup",
                    dir,
                    e,
                    "a process may still be inside it; kill it first".into(),
                ))
            }
        }
    }
}

/// Sleep between polling rounds: 1 ms doubling up to 50 ms.
fn backoff(round: u32) -> Duration {
    Duration::from_millis((1u64 << round.min(6)).min(50))
}

fn process_exists(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
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

/// A number from a cgroup file, `None` when it is not one.
fn read_number(path: &Path) -> Result<Option<u64>, CgroupError> {
    Ok(read_file(path)?.trim().parse().ok())
}

/// A v2-style limit file: a number, or `max` for none. A missing file means no limit.
fn read_v2_max(path: &Path) -> Result<Option<u64>, CgroupError> {
    if !path.exists() {
        return Ok(None);
    }
    Ok(read_file(path)?.trim().parse().ok())
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

/// The distinct v1 mounts with the controllers of interest bound to each.
fn v1_groups(mounts: &[(Controller, PathBuf)]) -> Vec<(PathBuf, Vec<Controller>)> {
    let mut out: Vec<(PathBuf, Vec<Controller>)> = Vec::new();
    for (c, path) in mounts {
        match out.iter_mut().find(|(p, _)| p == path) {
            Some((_, cs)) => cs.push(*c),
            None => out.push((path.clone(), vec![*c])),
        }
    }
    out
}

fn missing_parent(parent: &Path, base: &Path) -> CgroupError {
    CgroupError::InvalidParent {
        value: parent.display().to_string(),
        path: base.to_owned(),
        reason: "this cgroup does not exist; create it (or have it delegated) first".into(),
    }
}

fn create_v1(
    name: &str,
    limits: &Limits,
    layout: &Layout,
    mounts: &[(Controller, PathBuf)],
    parent: &Path,
) -> Result<BoxCgroup, CgroupError> {
    for c in requested(limits) {
        if layout.mount_of(c).is_none() {
            return Err(CgroupError::ControllerMissing {
                controller: c.name(),
                needed_for: c.needed_for(),
                path: layout.any_mount(),
                hint: format!(
                    "mount its hierarchy, e.g. `mkdir -p /sys/fs/cgroup/{0} && mount -t cgroup -o {0} cgroup /sys/fs/cgroup/{0}`",
                    c.name()
                ),
            });
        }
    }
    // pids and freezer are always used: they make every process of the box listable and
    // killable even when no limit is set.
    let mut wanted = vec![Controller::Pids, Controller::Freezer];
    wanted.extend(requested(limits));

    let mut groups = Vec::new();
    for (mount, controllers) in v1_groups(mounts) {
        let path = box_dir(&mount, parent, name);
        if controllers.iter().any(|c| wanted.contains(c)) || is_dir(&path) {
            let base = under(&mount, parent);
            if !is_dir(&base) {
                return Err(missing_parent(parent, &base));
            }
            groups.push(Group { path, controllers });
        }
    }
    if groups.is_empty() {
        return Err(cannot_create(
            limits,
            &layout.any_mount(),
            "neither the pids nor the freezer cgroup hierarchy is mounted".into(),
        ));
    }

    let old = BoxCgroup {
        name: name.to_owned(),
        version: 1,
        groups: groups.iter().filter(|g| is_dir(&g.path)).cloned().collect(),
    };
    let mut created = Vec::new();
    let result = (|| {
        for g in &groups {
            if let Some(agentbox) = g.path.parent() {
                ensure_dir(agentbox, limits)?;
            }
            if ensure_dir(&g.path, limits)? {
                created.push(g.path.clone());
            }
        }
        for g in &groups {
            apply_v1(g, limits)?;
        }
        move_existing(&old, &groups, &created)
    })();
    finish(name, 1, groups, created, result)
}

/// Move the processes already in the box's older directories into the ones just created, so
/// the invariant "every process is in every directory" holds after adopting.
fn move_existing(
    old: &BoxCgroup,
    groups: &[Group],
    created: &[PathBuf],
) -> Result<(), CgroupError> {
    if old.groups.is_empty() || created.is_empty() {
        return Ok(());
    }
    for pid in old.pids()? {
        for g in groups.iter().filter(|g| created.contains(&g.path)) {
            let procs = g.path.join("cgroup.procs");
            if let Err(e) = write_raw(&procs, &pid.to_string()) {
                // A process that exited meanwhile needs no moving.
                if process_exists(pid) {
                    return Err(CgroupError::io(
                        format!(
                            "moving process {pid} into a new hierarchy of box {}",
                            old.name
                        ),
                        &procs,
                        e,
                    ));
                }
            }
        }
    }
    Ok(())
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

fn apply_v1(g: &Group, limits: &Limits) -> Result<(), CgroupError> {
    let dir = &g.path;
    if g.has(Controller::Memory) {
        let limit_file = dir.join("memory.limit_in_bytes");
        let memsw = dir.join("memory.memsw.limit_in_bytes");
        let value = limits
            .memory_bytes
            .map_or_else(|| "-1".to_owned(), |b| b.to_string());
        let hint = "the box may already use more memory than the new limit";
        // RAM+swap must stay >= RAM, so lift it first, set RAM, then bound RAM+swap to the same
        // value: the box cannot escape its limit by swapping. The file exists only when the
        // kernel accounts swap.
        let has_memsw = memsw.exists();
        if has_memsw {
            write_file(&memsw, "-1", "lifting the box's memory+swap limit", "")?;
        }
        write_file(&limit_file, &value, "setting the box's memory limit", hint)?;
        if has_memsw {
            write_file(&memsw, &value, "setting the box's memory+swap limit", hint)?;
        }
    }
    if g.has(Controller::Pids) {
        let value = limits
            .pids
            .map_or_else(|| "max".to_owned(), |n| n.to_string());
        write_file(
            &dir.join("pids.max"),
            &value,
            "setting the box's process limit",
            "",
        )?;
    }
    if g.has(Controller::Cpu) {
        let quota = match limits.cpus {
            Some(c) => cpu_quota_us(c)?.to_string(),
            None => "-1".to_owned(),
        };
        let quota_file = dir.join("cpu.cfs_quota_us");
        if limits.cpus.is_some() && !quota_file.exists() {
            return Err(CgroupError::ControllerMissing {
                controller: "cpu",
                needed_for: "cpu limits",
                path: quota_file,
                hint: "the kernel lacks CFS bandwidth control (CONFIG_CFS_BANDWIDTH)".into(),
            });
        }
        if quota_file.exists() {
            write_file(
                &dir.join("cpu.cfs_period_us"),
                &CPU_PERIOD_US.to_string(),
                "setting the box's cpu period",
                "",
            )?;
            write_file(
                &quota_file,
                &quota,
                "setting the box's cpu quota",
                "a parent cgroup may have a smaller quota",
            )?;
        }
    }
    Ok(())
}

/// The controllers listed in a v2 `cgroup.controllers` or `cgroup.subtree_control` file.
fn v2_controller_list(path: &Path) -> Result<Vec<String>, CgroupError> {
    Ok(read_file(path)?
        .split_whitespace()
        .map(str::to_owned)
        .collect())
}

fn create_v2(
    name: &str,
    limits: &Limits,
    mount: &Path,
    parent: &Path,
) -> Result<BoxCgroup, CgroupError> {
    let base = under(mount, parent);
    if !is_dir(&base) {
        return Err(missing_parent(parent, &base));
    }
    let requested = requested(limits);
    let available = v2_controller_list(&base.join("cgroup.controllers"))?;
    for c in &requested {
        if !available.iter().any(|a| a == c.name()) {
            return Err(CgroupError::ControllerMissing {
                controller: c.name(),
                needed_for: c.needed_for(),
                path: base.clone(),
                hint: "it must be enabled in cgroup.subtree_control of every ancestor (with systemd: Delegate=yes on the unit owning this cgroup)".into(),
            });
        }
    }
    let agentbox = base.join(GROUP_DIR);
    ensure_dir(&agentbox, limits)?;

    // Enable the controllers from the root down to agentbox/, skipping the levels that already
    // have them: those above a delegated parent are not ours to write. An unavailable
    // controller only matters when its limit was asked for.
    let mut chain = vec![mount.to_owned()];
    let mut level = mount.to_owned();
    for comp in parent.components() {
        level.push(comp);
        chain.push(level.clone());
    }
    chain.push(agentbox.clone());
    for dir in &chain {
        let control = dir.join("cgroup.subtree_control");
        let enabled = v2_controller_list(&control)?;
        let offered = v2_controller_list(&dir.join("cgroup.controllers"))?;
        for c in [Controller::Memory, Controller::Pids, Controller::Cpu] {
            if enabled.iter().any(|e| e == c.name()) {
                continue;
            }
            let err = if offered.iter().any(|o| o == c.name()) {
                match write_raw(&control, &format!("+{}", c.name())) {
                    Ok(()) => continue,
                    Err(e) => e.to_string(),
                }
            } else {
                "not offered by the parent cgroup".to_owned()
            };
            if requested.contains(&c) {
                return Err(CgroupError::ControllerMissing {
                    controller: c.name(),
                    needed_for: c.needed_for(),
                    path: control,
                    hint: format!(
                        "enabling it failed: {err}; a cgroup with processes of its own cannot \
                         enable controllers for its children (move them to a leaf cgroup), and \
                         a non-root user needs the cgroup delegated"
                    ),
                });
            }
        }
    }

    let dir = agentbox.join(name);
    let mut created = Vec::new();
    let result = (|| {
        if ensure_dir(&dir, limits)? {
            created.push(dir.clone());
        }
        apply_v2(&dir, limits)
    })();
    let group = Group {
        path: dir,
        controllers: Controller::ALL.to_vec(),
    };
    finish(name, 2, vec![group], created, result)
}

fn apply_v2(dir: &Path, limits: &Limits) -> Result<(), CgroupError> {
    let set = |file: &str, value: String, what: &str, needed: Option<Controller>, hint: &str| {
        let path = dir.join(file);
        if !path.exists() {
            return match needed {
                Some(c) => Err(CgroupError::ControllerMissing {
                    controller: c.name(),
                    needed_for: c.needed_for(),
                    path,
                    hint: "the controller is not enabled for this cgroup".into(),
                }),
                None => Ok(()),
            };
        }
        write_file(&path, &value, what, hint)
    };
    let mem = limits.memory_bytes;
    set(
        "memory.max",
        mem.map_or_else(|| "max".to_owned(), |b| b.to_string()),
        "setting the box's memory limit",
        mem.map(|_| Controller::Memory),
        "the box may already use more memory than the new limit",
    )?;
    // The limit covers RAM and swap together, as on v1: with a limit, the box does not swap.
    set(
        "memory.swap.max",
        if mem.is_some() { "0" } else { "max" }.to_owned(),
        "setting the box's swap limit",
        None,
        "",
    )?;
    set(
        "pids.max",
        limits
            .pids
            .map_or_else(|| "max".to_owned(), |n| n.to_string()),
        "setting the box's process limit",
        limits.pids.map(|_| Controller::Pids),
        "",
    )?;
    let quota = match limits.cpus {
        Some(c) => cpu_quota_us(c)?.to_string(),
        None => "max".to_owned(),
    };
    set(
        "cpu.max",
        format!("{quota} {CPU_PERIOD_US}"),
        "setting the box's cpu quota",
        limits.cpus.map(|_| Controller::Cpu),
        "",
    )
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
mod tests {
    use super::*;

    #[test]
    fn parse_memory_sizes() {
        let ok = [
            ("1048576", 1_048_576),
            ("512M", 512 << 20),
            ("512m", 512 << 20),
            ("2G", 2 << 30),
            ("1.5G", 3 << 29),
            ("2GiB", 2 << 30),
            ("64 KB", 64 << 10),
            ("1T", 1 << 40),
            (".5K", 512),
            ("100b", 100),
        ];
        for (s, want) in ok {
            assert_eq!(Limits::parse_memory(s).expect(s), want, "{s}");
        }
        for bad in [
            "",
            "M",
            "-1M",
            "1.5",
            "0",
            "0M",
            "1..5G",
            "1.2.3G",
            "12X",
            "1e9",
            "99999999999999999999T",
            "G1",
        ] {
            assert!(
                Limits::parse_memory(bad).is_err(),
                "{bad:?} must be rejected"
            );
        }
    }

    #[test]
    fn oom_kill_counts_and_sizes() {
        let v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        assert_eq!(oom_kill_count(v1), Some(3));
        let v2 = "low 0\nhigh 0\nmax 5\noom 2\noom_kill 2\noom_group_kill 0\n";
        assert_eq!(oom_kill_count(v2), Some(2));
        assert_eq!(oom_kill_count("oom_kill_disable 0\n"), None);
        assert_eq!(size_text(64 << 20), "64.0 MiB");
        assert_eq!(size_text(1536 << 20), "1.5 GiB");
        assert_eq!(size_text(100), "100 bytes");
    }

    #[test]
    fn limits_validate() {
        assert!(Limits::default().is_empty());
        assert!(Limits::default().validate().is_ok());
        let l = |memory_bytes, pids, cpus| Limits {
            memory_bytes,
            pids,
            cpus,
        };
        assert!(!l(None, Some(3), None).is_empty());
        assert!(l(Some(0), None, None).validate().is_err());
        assert!(l(None, Some(0), None).validate().is_err());
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 0.001] {
            assert!(l(None, None, Some(bad)).validate().is_err(), "{bad}");
        }
        assert_eq!(cpu_quota_us(1.5).expect("quota"), 150_000);
        assert_eq!(cpu_quota_us(0.01).expect("quota"), 1_000);
        assert_eq!(
            l(Some(32 << 20), Some(10), Some(1.5)).describe(),
            "memory 32 MiB, pids 10, cpus 1.5"
        );
    }

    #[test]
    fn limits_serde_defaults_missing_fields() {
        let l: Limits = serde_json::from_str(r#"{"pids": 5}"#).expect("json");
        assert_eq!(
            l,
            Limits {
                pids: Some(5),
                ..Limits::default()
            }
        );
    }

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    const PURE_V2: &str = "\
22 1 0:21 / /proc rw,nosuid - proc proc rw
30 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";

    const JOINT_V1: &str = "\
40 31 0:37 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/cpu,cpuacct rw shared:9 - cgroup cgroup rw,cpu,cpuacct
42 31 0:39 /docker/abc /mnt/memory\\040dup rw - cgroup cgroup rw,memory
43 31 0:39 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
44 31 0:40 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
";

    #[test]
    fn layout_hybrid_is_v1() {
        let layout = Layout::from_mounts(&parse_mountinfo(HYBRID)).expect("layout");
        let Layout::V1 { mounts } = &layout else {
            panic!("hybrid must be v1: {layout:?}");
        };
        assert_eq!(mounts.len(), 4);
        assert_eq!(
            layout.mount_of(Controller::Cpu),
            Some(Path::new("/sys/fs/cgroup/cpu"))
        );
        assert_eq!(
            layout.mount_of(Controller::Freezer),
            Some(Path::new("/sys/fs/cgroup/freezer"))
        );
    }

    #[test]
    fn layout_pure_v2() {
        let layout = Layout::from_mounts(&parse_mountinfo(PURE_V2)).expect("layout");
        assert_eq!(
            layout,
            Layout::V2 {
                mount: PathBuf::from("/sys/fs/cgroup")
            }
        );
    }

    #[test]
    fn layout_joint_mounts_and_duplicates() {
        let entries = parse_mountinfo(JOINT_V1);
        assert_eq!(entries[2].mount_point, Path::new("/mnt/memory dup"));
        let layout = Layout::from_mounts(&entries).expect("layout");
        // The mount showing the hierarchy root wins over a bind of a sub-cgroup.
        assert_eq!(
            layout.mount_of(Controller::Memory),
            Some(Path::new("/sys/fs/cgroup/memory"))
        );
        assert_eq!(layout.mount_of(Controller::Freezer), None);
        let Layout::V1 { mounts } = &layout else {
            panic!("must be v1");
        };
        let groups = v1_groups(mounts);
        assert_eq!(groups.len(), 3, "{groups:?}");
    }

    #[test]
    fn layout_none_without_cgroups() {
        assert_eq!(Layout::from_mounts(&parse_mountinfo("")), None);
        // A v1 mount carrying only a named hierarchy does not make the machine v1.
        let only_named = "40 31 0:37 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd\n";
        assert_eq!(Layout::from_mounts(&parse_mountinfo(only_named)), None);
    }

    #[test]
    fn unescape() {
        assert_eq!(agentbox_store::mounts::unescape(r"/a\040b\134c"), r"/a b\c");
        assert_eq!(agentbox_store::mounts::unescape(r"/a\04"), r"/a\04");
        assert_eq!(agentbox_store::mounts::unescape(r"\"), r"\");
    }

    #[test]
    fn names() {
        for ok in ["web", "test-12-x", "a.b_c", "0"] {
            validate_name(ok).expect(ok);
        }
        for bad in [
            "",
            ".",
            "..",
            "-x",
            "a/b",
            ".hidden",
            "a b",
            &"x".repeat(129),
        ] {
            assert!(validate_name(bad).is_err(), "{bad:?} must be rejected");
        }
    }

    /// The v2 code path on the machine's cgroup2 mount, even on a hybrid machine where it has
    /// no controllers: processes are listed, killed (with `cgroup.kill`, and by freezing) and
    /// the group removed.
    #[test]
    fn v2_lifecycle_on_the_unified_mount() {
        use std::io::{BufRead, Write};
        use std::os::unix::process::ExitStatusExt;
        use std::process::{Command, Stdio};

        if !agentbox_testkit::tier::require_root("v2_lifecycle_on_the_unified_mount") {
            return;
        }
        let text = fs_err::read_to_string("/proc/self/mountinfo").expect("mountinfo");
        let Some(mount) = parse_mountinfo(&text)
            .into_iter()
            .find(|e| e.fstype == "cgroup2" && e.root == "/")
            .map(|e| e.mount_point)
        else {
            eprintln!("SKIP v2_lifecycle_on_the_unified_mount: no cgroup2 mount here");
            return;
        };

        struct Remove(BoxCgroup);
        impl Drop for Remove {
            fn drop(&mut self) {
                let _ = self.0.clone().remove();
            }
        }

        for use_kill_file in [true, false] {
            let name = format!("unit-{}-v2-{use_kill_file}", std::process::id());
            let cg = create_v2(&name, &Limits::default(), &mount, Path::new("")).expect("create");
            let _remove = Remove(cg.clone());
            assert_eq!(cg.version(), 2);
            assert_eq!(cg.dirs(), vec![mount.join("agentbox").join(&name)]);

            let mut sh = Command::new("sh")
                .arg("-c")
                .arg("read go; sleep 600 & sleep 600 & echo ready; wait")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn sh");
            cg.add(sh.id()).expect("add");
            sh.stdin
                .take()
                .expect("stdin")
                .write_all(b"go\n")
                .expect("go");
            let mut line = String::new();
            std::io::BufReader::new(sh.stdout.take().expect("stdout"))
                .read_line(&mut line)
                .expect("ready");
            assert_eq!(line.trim(), "ready");
            assert_eq!(cg.pids().expect("pids").len(), 3);

            cg.kill_all_with(use_kill_file).expect("kill_all");
            assert_eq!(cg.pids().expect("pids"), Vec::<u32>::new());
            assert_eq!(sh.wait().expect("wait").signal(), Some(9));
            let dir = cg.dirs()[0].to_owned();
            cg.remove().expect("remove");
            assert!(!dir.exists());
        }

        // A limit whose controller the mount does not offer is refused, naming it.
        let offered = v2_controller_list(&mount.join("cgroup.controllers")).expect("controllers");
        if !offered.iter().any(|c| c == "pids") {
            let name = format!("unit-{}-v2-pids", std::process::id());
            let limits = Limits {
                pids: Some(3),
                ..Limits::default()
            };
            let e = create_v2(&name, &limits, &mount, Path::new("")).expect_err("no pids");
            assert!(
                matches!(
                    e,
                    CgroupError::ControllerMissing {
                        controller: "pids",
                        ..
                    }
                ),
                "{e}"
            );
            assert!(!mount.join("agentbox").join(&name).exists());
        }
    }

    #[test]
    fn unwritable_root_without_limits_is_unavailable() {
        let path = Path::new("/sys/fs/cgroup/pids/agentbox");
        let e = cannot_create(&Limits::default(), path, "permission denied".into());
        assert!(e.is_unavailable(), "{e}");
        let limited = Limits {
            pids: Some(4),
            ..Limits::default()
        };
        let e = cannot_create(&limited, path, "permission denied".into());
        assert!(!e.is_unavailable());
        let msg = e.to_string();
        assert!(msg.contains("run agentbox as root"), "{msg}");
        assert!(msg.contains(PARENT_ENV), "{msg}");
        assert!(msg.contains("pids 4"), "{msg}");
    }
}
