//! Where the cgroup hierarchies are (v1 or v2, from mountinfo) and under which parent
//! agentbox makes its groups.

use super::*;

/// One line of `/proc/self/mountinfo`, the fields this module needs.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct MountEntry {
    /// The path inside the filesystem that is mounted (for cgroups: the cgroup shown at the
    /// mount point).
    pub(super) root: String,
    pub(super) mount_point: PathBuf,
    pub(super) fstype: String,
    pub(super) super_options: Vec<String>,
}

/// Parse mountinfo text, keeping only cgroup (v1 and v2) mounts. Malformed lines are skipped:
/// the kernel writes this file, and a line we cannot read is a line we cannot use anyway.
pub(super) fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
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
            root: agentbox_core::mountinfo::unescape(left[3]),
            mount_point: PathBuf::from(agentbox_core::mountinfo::unescape(left[4])),
            fstype: fstype.to_owned(),
            super_options: right[2].split(',').map(str::to_owned).collect(),
        });
    }
    out
}

/// Where the cgroup hierarchies this module uses are mounted.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Layout {
    /// One mount point per controller; two controllers may share one (e.g. `cpu,cpuacct`).
    V1 { mounts: Vec<(Controller, PathBuf)> },
    /// The unified hierarchy's mount point.
    V2 { mount: PathBuf },
}

impl Layout {
    /// Pick the layout from the cgroup mounts, or `None` when no usable cgroup is mounted.
    /// When a hierarchy is mounted more than once, the mount showing its root wins.
    pub(super) fn from_mounts(entries: &[MountEntry]) -> Option<Layout> {
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

    pub(super) fn detect() -> Result<Option<Layout>, CgroupError> {
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

    pub(super) fn mount_of(&self, c: Controller) -> Option<&Path> {
        match self {
            Layout::V1 { mounts } => mounts
                .iter()
                .find(|(m, _)| *m == c)
                .map(|(_, p)| p.as_path()),
            Layout::V2 { mount } => Some(mount),
        }
    }

    /// Any mount point, for error messages.
    pub(super) fn any_mount(&self) -> PathBuf {
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
pub(super) fn parent_from_env() -> Result<PathBuf, CgroupError> {
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
