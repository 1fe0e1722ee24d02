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
//!
//! The host user's home ([`host_user_home`]) is hidden whole, but its toolchains
//! ([`HOME_TOOLS`]) and package caches ([`HOME_CACHES`]), plus what `box.homeTools` adds,
//! are shown again at their host paths ([`HostView::show`]): read from the host,
//! copy-on-write into the box's layer. Credentials in the home ([`HOME_SECRETS`]) and every
//! other secret stay hidden even inside a shown directory.

use std::path::{Component, Path, PathBuf};

use agentbox_core::home::Home;

use crate::record::BoxRecord;

mod home;

pub use self::home::{
    home_tool_paths, host_user_home, parse_home_tool, HomeTool, HOME_CACHES, HOME_SECRETS,
    HOME_TOOLS, TOOL_ENV,
};
use self::home::{home_tools, tool_env};

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

/// What of the host's `/` a box sees.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostView {
    /// Paths of the host's `/` hidden from the box.
    pub hide: Vec<PathBuf>,
    /// Paths below hidden ones shown again, copy-on-write (the host user's toolchains and
    /// package caches). Hidden paths below them stay hidden.
    pub show: Vec<PathBuf>,
    /// Environment variables that point the shown toolchains at their homes, for a host
    /// user whose home is not the box's (`/root`): see [`TOOL_ENV`].
    pub env: Vec<(String, String)>,
}

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

/// What of the host's `/` the box `rec` of agentbox home `home` sees: the paths hidden,
/// and below them the host user's toolchains and caches shown again.
pub fn host_view(home: &Home, rec: &BoxRecord) -> HostView {
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
    // Up to here, secrets that nothing shows; the homes are hidden whole too, but the host
    // user's toolchains below its home are shown again.
    let never_shown = secrets.clone();
    // The user's home, wherever it is (not only under /home), and the invoking user's.
    let user_home = host_user_home();
    let mut homes: Vec<PathBuf> = ["HOME", "SUDO_HOME"]
        .iter()
        .filter_map(std::env::var_os)
        .map(PathBuf::from)
        .chain(user_home.clone())
        .filter(|h| h.is_absolute() && h != Path::new("/"))
        .collect();
    homes.extend(
        homes
            .iter()
            .filter_map(|h| fs_err::canonicalize(h).ok())
            .collect::<Vec<_>>(),
    );
    secrets.extend(homes);
    let mut show = Vec::new();
    let mut env = Vec::new();
    if let Some(user_home) = &user_home {
        let (tools, hidden) = home_tools(user_home, &rec.home_tools, &never_shown);
        show = tools;
        secrets.extend(hidden);
        env = tool_env(user_home, &show);
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
    HostView { hide, show, env }
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
