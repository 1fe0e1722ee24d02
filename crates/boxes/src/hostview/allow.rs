//! Which of the host's `/` a root-based box sees by default: an allow-list of system paths
//! ([`SHOWN`]), whose complement is computed when the box starts ([`hidden_by_default`]) —
//! a directory made on the host later is hidden from the next box without anyone listing
//! it — and, within what is shown, nothing that an unprivileged host user could not read
//! ([`unreadable`]).
//!
//! Why the second rule: a root box's base is idmapped, so box root owns the host's
//! root-owned files and its `CAP_DAC_OVERRIDE` (in its user namespace) applies to them. The
//! base cannot be left unmapped instead: box root would then own nothing of `/usr`, `/etc`
//! or `/var/lib/dpkg`, and `apt install`, `echo >> /etc/hosts` or any copy-up of a host
//! file would fail. So the host files box root could read only by that override are not
//! there at all: every file without the "others may read" bit, every directory without the
//! "others may read and search" bits, in the paths shown, is hidden.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The directories whose entries are shown by name, each with those names; every other
/// entry (but a symlink: it shows nothing by itself, its target is looked up in the box
/// and hidden or shown on its own) is hidden. Below a shown entry everything is shown but
/// secrets and what [`unreadable`] finds.
pub(crate) const SHOWN: &[(&str, &[&str])] = &[
    (
        "/",
        &[
            "usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "var",
        ],
    ),
    // `/var/run` and `/var/lock` are symlinks into the box's own `/run`; `/var/tmp` is
    // hidden (an empty directory the box writes in its layer).
    ("/var", &["lib", "cache"]),
    // The package managers' state, so that `apt`, `dpkg -l` and `pip` see what is
    // installed. Everything else there is data (databases, container images, other
    // programs' state).
    (
        "/var/lib",
        &[
            "dpkg",
            "apt",
            "ucf",
            "pam",
            "python",
            "misc",
            "shells.state",
        ],
    ),
    // apt's package cache and debconf's answers (its passwords are a secret).
    ("/var/cache", &["apt", "debconf"]),
];

/// An entry of a host directory: its path and whether it is a symlink.
pub(crate) type Entry = (PathBuf, bool);

/// The host's entries at the directories of [`SHOWN`] that are not shown, `list` giving a
/// directory's entries (none when it cannot be read).
pub(crate) fn hidden_by_default(list: &dyn Fn(&Path) -> Vec<Entry>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for (dir, names) in SHOWN {
        for (path, symlink) in list(Path::new(dir)) {
            let shown = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| names.contains(&n));
            if !shown && !symlink {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The entries of host directory `dir`.
pub(crate) fn host_entries(dir: &Path) -> Vec<Entry> {
    let Ok(entries) = fs_err::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| {
            let symlink = e.file_type().is_ok_and(|t| t.is_symlink());
            (e.path(), symlink)
        })
        .collect()
}

/// The paths of [`SHOWN`] that are directories of the host, each below none of the others
/// (a symlink is left out: what it leads to is judged where it is).
pub(crate) fn shown_roots() -> Vec<PathBuf> {
    let mut roots = Vec::new();
    for (dir, names) in SHOWN {
        for n in *names {
            let p = Path::new(dir).join(n);
            // A shown directory that has its own shown entries is scanned through those.
            if SHOWN.iter().any(|(d, _)| Path::new(d) == p) {
                continue;
            }
            if fs_err::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
                roots.push(p);
            }
        }
    }
    roots
}

/// Whether others (a host user in none of the file's groups) may read `mode`'s file: read
/// for a file, read and search for a directory. A symlink is always readable (its target
/// is judged on its own).
pub(crate) fn others_may_read(mode: u32) -> bool {
    const IFMT: u32 = libc::S_IFMT;
    match mode & IFMT {
        libc::S_IFLNK => true,
        libc::S_IFDIR => mode & 0o005 == 0o005,
        _ => mode & 0o004 != 0,
    }
}

/// Everything below (and at) `roots` that others may not read, without descending into what
/// is found (hiding a directory hides its content) nor into another file system (the base's
/// overlay does not show it). Cost: one `lstat` per file — for a `/usr` and `/etc` of
/// 133,000 files, about 0.4 s warm on one core, 0.2 s on two (10 s with a cold cache), at
/// every start of a root box — spread over the machine's cores (up to 8): directories go
/// through one queue that every thread takes from and adds to.
pub fn unreadable(roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut scan = Scan::default();
    for root in roots {
        let Ok(meta) = fs_err::symlink_metadata(root) else {
            continue;
        };
        if !others_may_read(meta.permissions().mode()) {
            scan.found.push(root.clone());
        } else if meta.is_dir() {
            scan.todo.push((root.clone(), meta.dev()));
        }
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    let shared = (std::sync::Mutex::new(scan), std::sync::Condvar::new());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| scan_worker(&shared.0, &shared.1));
        }
    });
    let mut out = shared
        .0
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .found;
    out.sort();
    out.dedup();
    out
}

/// The state of a scan shared by its threads: directories to read (with the device of the
/// root they are below), how many threads are reading one, and what was found.
#[derive(Default)]
struct Scan {
    todo: Vec<(PathBuf, u64)>,
    busy: usize,
    found: Vec<PathBuf>,
}

/// One thread of [`unreadable`]: takes a directory, reads it, queues the subdirectories
/// others may enter, and ends when the queue is empty and no thread is reading (no more
/// can come).
fn scan_worker(state: &std::sync::Mutex<Scan>, more: &std::sync::Condvar) {
    let lock = || {
        state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    loop {
        let (dir, dev) = {
            let mut st = lock();
            loop {
                if let Some(next) = st.todo.pop() {
                    st.busy += 1;
                    break next;
                }
                if st.busy == 0 {
                    more.notify_all();
                    return;
                }
                st = more
                    .wait(st)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
        };
        let mut dirs = Vec::new();
        let mut found = Vec::new();
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                // A symlink shows nothing by itself: no `lstat` needed.
                if e.file_type().is_ok_and(|t| t.is_symlink()) {
                    continue;
                }
                let Ok(m) = e.metadata() else { continue };
                if !others_may_read(m.permissions().mode()) {
                    found.push(e.path());
                } else if m.is_dir() && m.dev() == dev {
                    dirs.push((e.path(), dev));
                }
            }
        }
        let mut st = lock();
        st.found.append(&mut found);
        st.todo.append(&mut dirs);
        st.busy -= 1;
        more.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everything_not_allowed_is_hidden_but_symlinks() {
        let list = |dir: &Path| -> Vec<Entry> {
            let e = |n: &str, l: bool| (Path::new(dir).join(n), l);
            match dir.to_str() {
                Some("/") => vec![
                    e("usr", false),
                    e("bin", true),
                    e("etc", false),
                    e("opt", false),
                    e("srv", false),
                    e("home", false),
                    e("data-2027", false),
                    e("pyenv-installer", false),
                    e("var", false),
                ],
                Some("/var") => vec![
                    e("lib", false),
                    e("log", false),
                    e("run", true),
                    e("cache", false),
                ],
                Some("/var/lib") => vec![e("dpkg", false), e("postgresql", false)],
                Some("/var/cache") => vec![e("apt", false), e("private", false)],
                _ => Vec::new(),
            }
        };
        let hidden = hidden_by_default(&list);
        let want: Vec<PathBuf> = [
            "/data-2027",
            "/home",
            "/opt",
            "/pyenv-installer",
            "/srv",
            "/var/cache/private",
            "/var/lib/postgresql",
            "/var/log",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(hidden, want);
    }

    #[test]
    fn others_must_read_files_and_search_directories() {
        assert!(others_may_read(libc::S_IFREG | 0o644));
        assert!(!others_may_read(libc::S_IFREG | 0o640));
        assert!(!others_may_read(libc::S_IFREG | 0o600));
        assert!(others_may_read(libc::S_IFDIR | 0o755));
        assert!(!others_may_read(libc::S_IFDIR | 0o711));
        assert!(!others_may_read(libc::S_IFDIR | 0o754));
        assert!(others_may_read(libc::S_IFLNK | 0o777));
    }

    #[test]
    fn unreadable_files_are_found_and_hidden_directories_not_entered() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).expect("chmod")
        };
        std::fs::create_dir_all(d.join("open/closed")).expect("mkdir");
        for f in ["open/a", "open/secret", "open/closed/x"] {
            std::fs::write(d.join(f), "x").expect("write");
        }
        mode(&d.join("open/a"), 0o644);
        mode(&d.join("open/secret"), 0o600);
        mode(&d.join("open/closed/x"), 0o600);
        mode(&d.join("open/closed"), 0o700);
        mode(&d.join("open"), 0o755);
        std::os::unix::fs::symlink("secret", d.join("open/link")).expect("symlink");
        assert_eq!(
            unreadable(&[d.join("open")]),
            vec![d.join("open/closed"), d.join("open/secret")]
        );
    }
}
