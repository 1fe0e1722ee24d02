//! Reading the kernel's mount table.

use std::path::{Path, PathBuf};

/// One line of a `mountinfo` file (`/proc/<pid>/mountinfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountInfo {
    pub mount_point: PathBuf,
    pub fstype: String,
    pub source: String,
    /// The mounted filesystem's device, `major:minor`.
    pub dev: String,
    /// The optional fields: propagation (`shared:N`, `master:N`, …).
    pub tags: Vec<String>,
}

/// Every mount of this process's namespace, in mount order, escapes decoded.
pub fn mounts() -> Vec<MountInfo> {
    mounts_in(Path::new("/proc/self/mountinfo"))
}

/// Every mount listed in the `mountinfo` file `path` (none when it cannot be read).
pub fn mounts_in(path: &Path) -> Vec<MountInfo> {
    let Ok(text) = std::fs::read_to_string(path) else {
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
                dev: fields.get(2)?.to_string(),
                tags: fields.get(6..dash)?.iter().map(|t| t.to_string()).collect(),
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

/// Whether the filesystem mounted at `mountpoint` (device number `dev`, e.g. an overlay's
/// `st_dev`) is mounted anywhere else: another mount of it in this mount namespace, or one in
/// any other mount namespace a process of this machine is in (read through
/// `/proc/<pid>/mountinfo`, one process per namespace). Not counted: the copies that mount
/// propagation made of this very mount in other namespaces (same mount point, a peer or a
/// slave of its peer group), which an unmount here takes away with it. A mount no namespace
/// holds any more (lazily unmounted while a file stays open) is not seen; processes that
/// vanish meanwhile are skipped.
pub fn mounted_elsewhere(mountpoint: &Path, dev: u64) -> bool {
    let want = format!("{}:{}", rustix::fs::major(dev), rustix::fs::minor(dev));
    let here = std::fs::canonicalize(mountpoint).unwrap_or_else(|_| mountpoint.to_owned());
    let of_dev = |mountinfo: &Path| -> Vec<MountInfo> {
        mounts_in(mountinfo)
            .into_iter()
            .filter(|m| m.dev == want)
            .collect()
    };
    let own = of_dev(Path::new("/proc/self/mountinfo"));
    let [this] = own.as_slice() else {
        // More than this mount here; or none seen, and then nothing can be told.
        return true;
    };
    // The peer group of this mount: copies propagated from it carry it as `shared:G`
    // (peers) or `master:G` (slaves).
    let group = this.tags.iter().find_map(|t| t.strip_prefix("shared:"));
    let propagated = |m: &MountInfo| {
        m.mount_point == here
            && group.is_some_and(|g| {
                m.tags.iter().any(|t| {
                    t.strip_prefix("shared:")
                        .or_else(|| t.strip_prefix("master:"))
                        == Some(g)
                })
            })
    };
    let mut seen = std::collections::HashSet::new();
    if let Ok(ns) = std::fs::read_link("/proc/self/ns/mnt") {
        seen.insert(ns);
    }
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
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
        if seen.insert(ns)
            && of_dev(&dir.join("mountinfo"))
                .iter()
                .any(|m| !propagated(m))
        {
            return true;
        }
    }
    false
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
