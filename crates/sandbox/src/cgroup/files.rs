//! The cgroup filesystem as this module uses it: reading and writing control files with
//! errors that name them, making a box's directory, and listing, killing and removing what
//! is below it (with bounded retries, as the kernel empties a group asynchronously).

use super::*;

/// Whether an IO error means "this user may not do this here".
pub(super) fn is_permission(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem
    )
}

pub(super) fn read_file(path: &Path) -> Result<String, CgroupError> {
    fs_err::read_to_string(path).map_err(|e| CgroupError::io("reading a cgroup file", path, e))
}

/// Write `value` to a cgroup control file in a single `write(2)`, as the kernel requires.
pub(super) fn write_raw(path: &Path, value: &str) -> io::Result<()> {
    let mut f = fs_err::OpenOptions::new().write(true).open(path)?;
    f.write_all(value.as_bytes())
}

pub(super) fn write_file(
    path: &Path,
    value: &str,
    what: &str,
    hint: &str,
) -> Result<(), CgroupError> {
    write_raw(path, value).map_err(|e| {
        CgroupError::io_hint(
            format!("{what} (writing {:?})", value.trim()),
            path,
            e,
            hint.to_owned(),
        )
    })
}

pub(super) fn is_dir(path: &Path) -> bool {
    path.symlink_metadata().map(|m| m.is_dir()).unwrap_or(false)
}

/// Make `dir` if missing. Returns whether this call made it.
pub(super) fn ensure_dir(dir: &Path, limits: &Limits) -> Result<bool, CgroupError> {
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
pub(super) fn collect_procs(dir: &Path, out: &mut Vec<u32>) -> Result<(), CgroupError> {
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
pub(super) fn sub_cgroups(dir: &Path) -> Result<Vec<PathBuf>, CgroupError> {
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
pub(super) fn remove_tree(dir: &Path) -> Result<(), CgroupError> {
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
pub(super) fn backoff(round: u32) -> Duration {
    Duration::from_millis((1u64 << round.min(6)).min(50))
}

pub(super) fn process_exists(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// A number from a cgroup file, `None` when it is not one.
pub(super) fn read_number(path: &Path) -> Result<Option<u64>, CgroupError> {
    Ok(read_file(path)?.trim().parse().ok())
}

/// A v2-style limit file: a number, or `max` for none. A missing file means no limit.
pub(super) fn read_v2_max(path: &Path) -> Result<Option<u64>, CgroupError> {
    if !path.exists() {
        return Ok(None);
    }
    Ok(read_file(path)?.trim().parse().ok())
}
