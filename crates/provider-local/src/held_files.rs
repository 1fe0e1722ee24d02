//! The files a box's processes hold: open descriptors and shared writable mappings.
//!
//! A write through a shared mapping raises no inotify event while the file stays open (the
//! close does), so a change check that trusts the layer's watcher must also look at every
//! file held now. Paths come from `/proc` as the box sees them (`/workspace/a`), which is
//! the path below the box's root, and so below its layer; a path of another mount of the
//! box (a `tmpfs`, a shown host directory) names nothing in the layer, and is only one
//! `lstat` more.
//!
//! The box's processes are those of its PID 1's PID namespace: a box cannot make another
//! one (its seccomp filter denies new namespaces), and daemonizing does not leave it. One
//! `readlink` of `/proc/PID/ns/pid` per host process finds them, where reading every
//! process's parent from `/proc/PID/stat` took a few times that. Everything read here is
//! the box's own data: paths are taken as names only, never opened.

use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// The layer-relative paths of every file the processes of the box with host PID `pid1`
/// hold open or map shared and writable, or `None` if they cannot all be listed.
pub fn held_paths(pid1: i32) -> Option<Vec<PathBuf>> {
    let pids = box_pids(pid1)?;
    let mut out: BTreeSet<PathBuf> = BTreeSet::new();
    for pid in pids {
        let fd_dir = format!("/proc/{pid}/fd");
        let entries = match std::fs::read_dir(&fd_dir) {
            Ok(entries) => entries,
            // Exited meanwhile.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(_) => return None,
        };
        for entry in entries {
            let Ok(entry) = entry else { continue };
            if let Ok(target) = std::fs::read_link(entry.path()) {
                push_path(&mut out, target.as_os_str().as_bytes());
            }
        }
        match std::fs::read(format!("/proc/{pid}/maps")) {
            Ok(maps) => {
                for line in maps.split(|b| *b == b'\n') {
                    if let Some(path) = shared_writable(line) {
                        push_path(&mut out, path);
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(_) => return None,
        }
    }
    Some(out.into_iter().collect())
}

/// The path of a `/proc/PID/maps` line mapping a file shared and writable (`rw-s`).
fn shared_writable(line: &[u8]) -> Option<&[u8]> {
    let mut fields = line.splitn(6, |b| *b == b' ');
    let _range = fields.next()?;
    let perms = fields.next()?;
    if perms.get(1) != Some(&b'w') || perms.get(3) != Some(&b's') {
        return None;
    }
    let rest = fields.nth(3)?;
    let path = rest.trim_ascii_start();
    path.starts_with(b"/").then_some(path)
}

/// Add an absolute path as the box sees it, relative to its root; anything else (sockets,
/// pipes, anonymous files, deleted files) names nothing in the layer.
fn push_path(out: &mut BTreeSet<PathBuf>, target: &[u8]) {
    if !target.starts_with(b"/") || target.ends_with(b" (deleted)") {
        return;
    }
    let rel = PathBuf::from(std::ffi::OsStr::from_bytes(&target[1..]));
    if !rel.as_os_str().is_empty() {
        out.insert(rel);
    }
}

/// Every process in the PID namespace of `pid1` (`pid1` first).
pub(crate) fn box_pids(pid1: i32) -> Option<Vec<i32>> {
    let ns = std::fs::read_link(format!("/proc/{pid1}/ns/pid")).ok()?;
    let mut out = vec![pid1];
    for entry in std::fs::read_dir("/proc").ok()? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        // Gone meanwhile, or not ours to look at (then not the box's either: its
        // processes are readable wherever their files are).
        if pid != pid1 && std::fs::read_link(format!("/proc/{pid}/ns/pid")).is_ok_and(|n| n == ns) {
            out.push(pid);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines() {
        assert_eq!(
            shared_writable(
                b"7fa5-7fa6 rw-s 00000000 00:39 10010803                   /workspace/db"
            ),
            Some(&b"/workspace/db"[..])
        );
        assert_eq!(
            shared_writable(b"7fa5-7fa6 r--s 00000000 00:39 10010803   /workspace/db"),
            None
        );
        assert_eq!(
            shared_writable(b"7fa5-7fa6 rw-p 00000000 00:39 10010803   /usr/lib/x.so"),
            None
        );
        assert_eq!(shared_writable(b"7fa5-7fa6 rw-s 00000000 00:00 0 "), None);
        assert_eq!(
            shared_writable(b"7fa5-7fa6 rw-s 00000000 00:01 7   /dev/zero (deleted)"),
            Some(&b"/dev/zero (deleted)"[..])
        );
    }

    #[test]
    fn this_process_holds_its_open_files() {
        let d = tempfile::tempdir().expect("tempdir");
        let f = d.path().join("held");
        let _file = std::fs::File::create(&f).expect("create");
        let me = std::process::id() as i32;
        let held = held_paths(me).expect("own /proc is readable");
        let rel = f.strip_prefix("/").expect("absolute");
        assert!(held.iter().any(|p| p == rel), "{held:?}");
    }
}
