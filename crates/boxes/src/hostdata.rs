//! What of the host's files a box on the host's `/` sees: the host's software, not its data.
//!
//! Hidden paths come in two kinds:
//! * **data** ([`HOST_DATA`], `/var/lib` but package-manager state): hidden by default, and
//!   shown where the box's `box.hostPaths` asks (`/srv/datasets`);
//! * **secrets** ([`SECRETS`], host keys, the user's home, the agentbox home and store, the
//!   file behind the store's filesystem, the host project and its git directory): hidden
//!   whatever `box.hostPaths` says — an entry that would show one is refused.
//!
//! `box.hostPaths` entries are absolute paths: `/PATH` shows a hidden data path (read-only,
//! as the rest of the base), `!/PATH` hides one more. Showing a path below a hidden data
//! directory hides that directory's other entries one by one instead ([`expand`]), so only
//! the path asked for appears.

use std::path::{Component, Path, PathBuf};

use agentbox_core::home::Home;

use crate::record::BoxRecord;

/// Host data directories a box never sees unless `box.hostPaths` shows them.
const HOST_DATA: &[&str] = &[
    "/root",
    "/home",
    "/srv",
    "/mnt",
    "/media",
    "/var/backups",
    "/var/mail",
    "/var/spool/mail",
    "/var/spool/cron",
];

/// Host files a box never sees, whatever `box.hostPaths` says: credentials and the host's
/// container engine's configuration.
const SECRETS: &[&str] = &[
    "/etc/docker",
    "/etc/ssl/private",
    // The host's password hashes are credentials too.
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers.d",
];

/// What of `/var/lib` a box sees: the package managers' state, so that `apt`, `dpkg -l`
/// and `pip` see what is installed. Everything else there is data (databases, container
/// images, other programs' state).
const VAR_LIB_SHOWN: &[&str] = &[
    "dpkg",
    "apt",
    "ucf",
    "pam",
    "python",
    "misc",
    "shells.state",
];

/// One `box.hostPaths` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPath {
    /// `/PATH`: shown in the box.
    Show(PathBuf),
    /// `!/PATH`: hidden too.
    Hide(PathBuf),
}

/// Parse a `box.hostPaths` entry: an absolute path of plain components, `!` in front to
/// hide it. Refuses a path that shows one of the fixed secrets.
pub fn parse(entry: &str) -> Result<HostPath, String> {
    let (hide, path) = match entry.strip_prefix('!') {
        Some(p) => (true, p),
        None => (false, entry),
    };
    let path = Path::new(path);
    let plain = path.is_absolute()
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if !plain || path == Path::new("/") {
        return Err(format!(
            "{entry:?} is not an absolute path below / without `.` or `..` (prefix it with ! to hide it)"
        ));
    }
    let path = path.components().collect::<PathBuf>();
    if hide {
        return Ok(HostPath::Hide(path));
    }
    if let Some(secret) = SECRETS
        .iter()
        .map(Path::new)
        .chain(ssh_host_keys().iter().map(PathBuf::as_path))
        .find(|s| path.starts_with(s))
    {
        return Err(format!(
            "{} holds secrets ({}), which a box never sees",
            path.display(),
            secret.display()
        ));
    }
    Ok(HostPath::Show(path))
}

/// The host's ssh host keys (`/etc/ssh/ssh_host_*_key`).
fn ssh_host_keys() -> Vec<PathBuf> {
    let Ok(entries) = fs_err::read_dir("/etc/ssh") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("ssh_host_") && name.ends_with("_key")
        })
        .map(|e| e.path())
        .collect()
}

/// The paths of the host's `/` hidden from the box `rec` of agentbox home `home`.
pub fn hidden_paths(home: &Home, rec: &BoxRecord) -> Vec<PathBuf> {
    let mut data: Vec<PathBuf> = HOST_DATA.iter().map(PathBuf::from).collect();
    if let Ok(entries) = fs_err::read_dir("/var/lib") {
        for e in entries.flatten() {
            let name = e.file_name();
            if !VAR_LIB_SHOWN.iter().any(|s| name == *s) {
                data.push(e.path());
            }
        }
    }
    let mut secrets: Vec<PathBuf> = SECRETS.iter().map(PathBuf::from).collect();
    secrets.extend(ssh_host_keys());
    // The user's home, wherever it is (not only under /home), and the invoking user's.
    for var in ["HOME", "SUDO_HOME"] {
        if let Some(h) = std::env::var_os(var).map(PathBuf::from) {
            if h.is_absolute() && h != Path::new("/") {
                secrets.push(h);
            }
        }
    }
    for p in [home.root(), home.store_dir().as_path()] {
        secrets.push(p.to_owned());
        if let Ok(c) = fs_err::canonicalize(p) {
            secrets.push(c);
        }
    }
    if let Some(src) = &rec.source {
        secrets.push(src.clone());
    }
    // The file behind the store's filesystem (`agentbox setup --btrfs`'s image): it holds
    // every box's layers.
    secrets.extend(store_backing_files(home.store_dir().as_path()));
    for repo in &rec.repos {
        // The host repository's git directory — for a linked worktree or a submodule it is
        // outside the source — with its config (credentials), hooks and refs. The box
        // reaches its objects only through a read-only bind.
        secrets.push(repo.host().git_dir().to_owned());
        secrets.push(repo.repo.clone());
    }
    let mut shown = Vec::new();
    for entry in &rec.host_paths {
        match parse(entry) {
            Ok(HostPath::Show(p)) if !secrets.iter().any(|s| p.starts_with(s)) => shown.push(p),
            Ok(HostPath::Show(p)) => {
                eprintln!(
                    "box.hostPaths: {} holds secrets; it stays hidden",
                    p.display()
                )
            }
            Ok(HostPath::Hide(p)) => data.push(p),
            Err(e) => eprintln!("box.hostPaths: {e}; ignored"),
        }
    }
    let mut hide = expand(data, &shown, &|dir| {
        fs_err::read_dir(dir)
            .map(|entries| entries.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    });
    hide.extend(secrets);
    hide
}

/// The hidden data paths once `shown` are shown: a hidden path that is shown, or is below
/// a shown one, goes; a hidden directory with a shown path below it is replaced by its
/// entries (`list` gives them, as host paths), expanded the same way.
fn expand(
    hidden: Vec<PathBuf>,
    shown: &[PathBuf],
    list: &dyn Fn(&Path) -> Vec<PathBuf>,
) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = hidden;
    while let Some(h) = todo.pop() {
        if shown.iter().any(|s| h.starts_with(s)) {
            continue;
        }
        if shown.iter().any(|s| s.starts_with(&h)) {
            todo.extend(list(&h));
            continue;
        }
        out.push(h);
    }
    out.sort();
    out
}

/// Files backing the loop device the store's filesystem is on (none when it is not on a
/// loop device).
fn store_backing_files(store: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = fs_err::metadata(store) else {
        return Vec::new();
    };
    let (major, minor) = (libc::major(meta.dev()), libc::minor(meta.dev()));
    let Ok(backing) =
        fs_err::read_to_string(format!("/sys/dev/block/{major}:{minor}/loop/backing_file"))
    else {
        return Vec::new();
    };
    let path = PathBuf::from(backing.trim_end_matches('\n'));
    if path.is_absolute() {
        vec![path]
    } else {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(v: &[&str]) -> Vec<PathBuf> {
        v.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn entries_parse_and_secrets_are_refused() {
        assert_eq!(parse("/srv/data"), Ok(HostPath::Show("/srv/data".into())));
        assert_eq!(
            parse("!/opt/private"),
            Ok(HostPath::Hide("/opt/private".into()))
        );
        for bad in ["srv", "/srv/../etc/shadow", "/", "./x", ""] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        for secret in ["/etc/shadow", "/etc/ssl/private/key.pem", "/etc/sudoers.d"] {
            assert!(
                parse(secret).expect_err(secret).contains("secrets"),
                "{secret}"
            );
        }
        // An ancestor of a secret may be shown: the secret stays hidden below it.
        assert!(parse("/etc/ssl").is_ok());
    }

    #[test]
    fn a_shown_path_below_a_hidden_directory_hides_its_siblings_instead() {
        let list = |dir: &Path| -> Vec<PathBuf> {
            match dir.to_str() {
                Some("/srv") => paths(&["/srv/data", "/srv/www", "/srv/backup"]),
                Some("/srv/data") => paths(&["/srv/data/sets", "/srv/data/private"]),
                _ => Vec::new(),
            }
        };
        let hidden = paths(&["/srv", "/mnt", "/home"]);
        assert_eq!(
            expand(hidden.clone(), &paths(&["/srv/data/sets"]), &list),
            paths(&[
                "/home",
                "/mnt",
                "/srv/backup",
                "/srv/data/private",
                "/srv/www"
            ])
        );
        assert_eq!(
            expand(hidden.clone(), &paths(&["/mnt"]), &list),
            paths(&["/home", "/srv"])
        );
        // Showing an ancestor shows everything hidden below it.
        assert_eq!(
            expand(
                paths(&["/var/lib/docker", "/srv"]),
                &paths(&["/var"]),
                &list
            ),
            paths(&["/srv"])
        );
    }
}
