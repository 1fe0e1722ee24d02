//! Reading the kernel's mount table.

use std::path::{Path, PathBuf};

/// One line of `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountInfo {
    pub mount_point: PathBuf,
    pub fstype: String,
    pub source: String,
}

/// Every mount of this process's namespace, in mount order, escapes decoded.
pub fn mounts() -> Vec<MountInfo> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| {
            let fields: Vec<&str> = l.split(' ').collect();
            let mount_point = fields.get(4)?;
            // Optional fields end at " - "; then fstype and source follow.
            let dash = fields.iter().position(|f| *f == "-")?;
            Some(MountInfo {
                mount_point: PathBuf::from(unescape(mount_point)),
                fstype: fields.get(dash + 1)?.to_string(),
                source: unescape(fields.get(dash + 2)?),
            })
        })
        .collect()
}

/// Flags of every environment mounted on the host: `nosuid` and `nodev`, because its files
/// may come from a box or a bundle — a setuid-root program or a device node in them must
/// never act with host privileges for whoever runs or opens it on the host.
pub const HOST_MOUNT_FLAGS: rustix::mount::MountFlags = rustix::mount::MountFlags::from_bits_retain(
    rustix::mount::MountFlags::NOSUID.bits() | rustix::mount::MountFlags::NODEV.bits(),
);

/// The top-most mount at `path` (canonicalised when possible), if `path` is a mount point.
pub fn top_mount(path: &Path) -> Option<MountInfo> {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    mounts().into_iter().rev().find(|m| m.mount_point == path)
}

/// The mount that contains `path` (the longest mount point that is a prefix of it).
pub fn mount_containing(path: &Path) -> Option<MountInfo> {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    mounts()
        .into_iter()
        .rev()
        .filter(|m| path.starts_with(&m.mount_point))
        .max_by_key(|m| m.mount_point.as_os_str().len())
}

/// True when `path` is a mount point.
pub fn is_mountpoint(path: &Path) -> bool {
    top_mount(path).is_some()
}

/// Source name agentbox gives the overlays it mounts, so it only ever unmounts its own.
pub const OVERLAY_SOURCE: &str = "agentbox";

/// True when the top-most mount at `path` is an overlay agentbox mounted.
pub fn is_our_overlay(path: &Path) -> bool {
    top_mount(path).is_some_and(|m| m.fstype == "overlay" && m.source == OVERLAY_SOURCE)
}

pub use agentbox_core::mountinfo::unescape;

/// How many mounts show the filesystem whose device number is `dev` (`st_dev`, e.g. an
/// overlay's): those of this process's mount namespace plus those of every other mount
/// namespace a process of this machine is in (read through `/proc/<pid>/mountinfo`, one
/// process per namespace). A mount no namespace holds any more (lazily unmounted while a
/// file stays open) is not seen. Processes that vanish meanwhile are skipped.
pub fn mounts_of_device(dev: u64) -> usize {
    let want = format!("{}:{}", rustix::fs::major(dev), rustix::fs::minor(dev));
    let count_in = |mountinfo: &Path| -> usize {
        std::fs::read_to_string(mountinfo)
            .map(|text| {
                text.lines()
                    .filter(|l| l.split(' ').nth(2) == Some(want.as_str()))
                    .count()
            })
            .unwrap_or(0)
    };
    let mut seen = std::collections::HashSet::new();
    if let Ok(own) = std::fs::read_link("/proc/self/ns/mnt") {
        seen.insert(own);
    }
    let mut total = count_in(Path::new("/proc/self/mountinfo"));
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return total;
    };
    for entry in procs.flatten() {
        let name = entry.file_name();
        if !name.as_encoded_bytes().iter().all(u8::is_ascii_digit) {
            continue;
        }
        let dir = entry.path();
        let Ok(ns) = std::fs::read_link(dir.join("ns/mnt")) else {
            continue;
        };
        if seen.insert(ns) {
            total += count_in(&dir.join("mountinfo"));
        }
    }
    total
}

#[cfg(test)]
mod tests {
    #[test]
    fn unescape_spaces() {
        assert_eq!(super::unescape("/a\\040b"), "/a b");
        assert_eq!(super::unescape("/plain"), "/plain");
        assert_eq!(super::unescape(r"/plain\"), r"/plain\");
        assert!(super::is_mountpoint(std::path::Path::new("/")));
    }
}
