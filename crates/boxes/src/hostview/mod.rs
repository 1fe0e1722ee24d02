//! What of the host's files a box on the host's `/` sees: the host's software, not its data.
//!
//! It owns the rules (what is shown, what is hidden, what is a secret; the syntax of
//! `box.hostPaths` and `box.homeTools`) and their reading of the host (`allow`, `home`,
//! `npmrc`, `url`). It is a leaf of the crate: it reads no record, configuration or store —
//! it is given what of a box's record matters ([`BoxInputs`]) — and it binds nothing: the
//! provider applies the [`HostView`] it computes.
//!
//! The base is an **allow-list** ([`allow::SHOWN`]): `/usr`, `/bin`, `/sbin`, `/lib*`,
//! `/etc`, and of `/var` the package managers' state and caches. Every other entry of those
//! directories — `/opt`, `/srv`, `/home`, `/root`, `/var/log`, `/var/lib/postgresql`, a
//! directory the host makes tomorrow — is hidden, as listed when the box starts. A root
//! box's base also hides every file there that an unprivileged host user could not read
//! ([`allow::unreadable`]): box root owns the host's files through the idmapped base, and
//! must not read by that what no unprivileged user could.
//!
//! Hidden paths come in two kinds:
//! * **data** (the complement of the allow-list): hidden by default, and shown where the
//!   box's `box.hostPaths` asks (`/srv/datasets`);
//! * **secrets** ([`SECRETS`], host keys, the user's home, the agentbox home and store, the
//!   file behind the store's filesystem, the host project and its git directory, and what
//!   others may not read): hidden whatever `box.hostPaths` says — an entry that would show
//!   one is refused.
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
//! other secret stay hidden even inside a shown directory. They are the user's own files,
//! shown as the user sees them: they are not scanned for what others may not read.

use std::path::{Component, Path, PathBuf};

use agentbox_core::home::Home;

mod allow;
mod home;
mod npmrc;
pub(crate) mod url;

pub use self::home::{
    home_tool_paths, host_user_home, parse_home_tool, HomeTool, HOME_CACHES, HOME_SECRETS,
    HOME_TOOLS, TOOL_ENV,
};
use self::home::{home_tools, tool_env};
pub use self::npmrc::{filter as filter_npmrc, Npmrc, NPMRC_FILE};

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
    "/etc/sudoers",
    "/etc/sudoers.d",
    // Old password hashes, and the passwords debconf was given at package installation.
    "/etc/security/opasswd",
    "/var/cache/debconf/passwords.dat",
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
    /// The host user's `~/.npmrc` without its credentials (see [`npmrc`]), for the box's
    /// inbox ([`NPMRC_FILE`]); `env` points npm's global configuration at it.
    pub npmrc: Option<Npmrc>,
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

/// The files [`allow::unreadable`] found below the roots it was last asked about, kept by a
/// box's supervisor for its lifetime: a checkout starts the box again, and the scan
/// (0.2 s on two cores with a warm cache, seconds with a cold one) would otherwise be paid on every
/// rollback. A file the host makes unreadable to others while the box's supervisor runs is
/// hidden from the box at its next `start`, as the README says.
#[derive(Debug, Default)]
pub struct UnreadableScan {
    last: Option<(Vec<PathBuf>, Vec<PathBuf>)>,
}

impl UnreadableScan {
    /// What others may not read below `roots`: scanned once per set of roots.
    fn unreadable(&mut self, roots: Vec<PathBuf>) -> Vec<PathBuf> {
        match &self.last {
            Some((scanned, found)) if *scanned == roots => found.clone(),
            _ => {
                let found = allow::unreadable(&roots);
                self.last = Some((roots, found.clone()));
                found
            }
        }
    }
}

/// What of a box's record its view of the host depends on, made by
/// [`BoxRecord::host_inputs`](crate::records::record::BoxRecord::host_inputs): this module
/// is given it, and never reads a record itself.
#[derive(Debug, Clone, Default)]
pub struct BoxInputs<'a> {
    /// The host directory the box was made from (the box sees only its copy).
    pub source: Option<&'a Path>,
    /// For each repository of the box: the host repository's git directory (outside the
    /// source for a linked worktree or a submodule), then the host repository.
    pub repos: Vec<(PathBuf, PathBuf)>,
    /// `box.homeTools` entries.
    pub home_tools: &'a [String],
    /// `box.hostPaths` entries.
    pub host_paths: &'a [String],
    /// Whether the box's root is the user who runs it (see `allow`).
    pub rootless: bool,
}

/// What of the host's `/` the box `rec` of agentbox home `home` sees: the paths hidden,
/// and below them the host user's toolchains and caches shown again.
pub fn host_view(home: &Home, rec: &BoxInputs) -> HostView {
    host_view_scanned(home, rec, &mut UnreadableScan::default())
}

/// [`host_view`], with the scan for unreadable files kept in `scans` between calls.
pub fn host_view_scanned(home: &Home, rec: &BoxInputs, scans: &mut UnreadableScan) -> HostView {
    // Listed now, not when the box was made: what the host made since is hidden too.
    let mut data = allow::hidden_by_default(&allow::host_entries);
    let mut secrets: Vec<PathBuf> = SECRETS.iter().map(PathBuf::from).collect();
    secrets.extend(ssh_host_keys());
    for p in [home.root(), home.store_dir().as_path()] {
        secrets.push(p.to_owned());
        if let Ok(c) = fs_err::canonicalize(p) {
            secrets.push(c);
        }
    }
    if let Some(src) = rec.source {
        secrets.push(src.to_owned());
    }
    // The file behind the store's filesystem (`agentbox setup --btrfs`'s image): it holds
    // every box's layers.
    secrets.extend(store_backing_files(home.store_dir().as_path()));
    for (git_dir, repo) in &rec.repos {
        // The host repository's git directory — for a linked worktree or a submodule it is
        // outside the source — with its config (credentials), hooks and refs. The box
        // reaches its objects only through a read-only bind.
        secrets.push(git_dir.clone());
        secrets.push(repo.clone());
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
    let mut npmrc = None;
    if let Some(user_home) = &user_home {
        let (tools, hidden) = home_tools(user_home, rec.home_tools, &never_shown);
        show = tools;
        secrets.extend(hidden);
        env = tool_env(user_home, &show);
        npmrc = host_npmrc(user_home);
        if npmrc.is_some() {
            env.push((
                "npm_config_globalconfig".to_owned(),
                format!("{}/{NPMRC_FILE}", crate::types::INBOX_DIR),
            ));
        }
    }
    let mut shown = Vec::new();
    for entry in rec.host_paths {
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
    if !rec.rootless {
        // Box root owns the host's files (see `allow`); a rootless box's root is the user
        // who runs it, whom the kernel holds to the files' modes.
        let mut roots = allow::shown_roots();
        roots.extend(shown);
        hide.extend(scans.unreadable(roots));
    }
    hide.extend(secrets);
    HostView {
        hide,
        show,
        env,
        npmrc,
    }
}

/// The host user's `~/.npmrc`, filtered for a box: `None` when there is none (or it cannot
/// be read), or nothing of it is safe to show.
///
/// The file replaces npm's global configuration in the box, so it starts with the host's
/// global npmrc, filtered the same way but keeping its `cafile` (a company's CA, a registry
/// proxy's, without which npm in the box cannot reach the registry). The user's safe
/// settings follow, and win, as they do on the host.
fn host_npmrc(user_home: &Path) -> Option<Npmrc> {
    let text = fs_err::read_to_string(user_home.join(".npmrc")).ok()?;
    let mut out = npmrc::filter(&text);
    if out.text.is_empty() {
        return None;
    }
    if let Some(global) = host_global_npmrc() {
        // Each part starts with a comment line saying what it is.
        out.text = format!("{global}{}", out.text);
    }
    Some(out)
}

/// The host's global npmrc, filtered (see [`npmrc::filter_global`]): `$npm_config_globalconfig`,
/// else `<prefix>/etc/npmrc` where the prefix is the one of the `node` on `PATH` (npm's
/// default); only when everyone may read it.
fn host_global_npmrc() -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let path = match std::env::var_os("npm_config_globalconfig") {
        Some(p) => PathBuf::from(p),
        None => {
            let node = std::env::split_paths(&std::env::var_os("PATH")?)
                .map(|d| d.join("node"))
                .find(|p| p.is_file())?;
            let node = fs_err::canonicalize(node).ok()?;
            node.parent()?.parent()?.join("etc/npmrc")
        }
    };
    let meta = fs_err::metadata(&path).ok()?;
    if !meta.is_file() || meta.permissions().mode() & 0o004 == 0 {
        return None;
    }
    let global = npmrc::filter_global(&fs_err::read_to_string(&path).ok()?);
    (!global.text.is_empty()).then_some(global.text)
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
/// loop device). The device number of the store's files says which only for a file system
/// that reports its own device: btrfs gives its files an anonymous one, so the loop device
/// is also taken from the source of the mount the store is on.
fn store_backing_files(store: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let mut devices = Vec::new();
    if let Ok(meta) = fs_err::metadata(store) {
        let (major, minor) = (libc::major(meta.dev()), libc::minor(meta.dev()));
        devices.push(PathBuf::from(format!("/sys/dev/block/{major}:{minor}")));
    }
    let canonical = fs_err::canonicalize(store).unwrap_or_else(|_| store.to_owned());
    if let Some(name) = fs_err::read_to_string("/proc/self/mountinfo")
        .ok()
        .and_then(|info| mount_source(&info, &canonical))
        .as_deref()
        .and_then(|src| src.strip_prefix("/dev/"))
        .filter(|name| name.starts_with("loop") && !name.contains('/'))
    {
        devices.push(Path::new("/sys/block").join(name));
    }
    let mut out = Vec::new();
    for dev in devices {
        let Ok(backing) = fs_err::read_to_string(dev.join("loop/backing_file")) else {
            continue;
        };
        let path = PathBuf::from(backing.trim_end_matches('\n'));
        if path.is_absolute() && !out.contains(&path) {
            out.push(path);
        }
    }
    out
}

/// The source of the mount `path` (canonical) is on, from the text of a `mountinfo` file:
/// the mount whose mount point is the longest prefix of `path`, the last one mounted there.
fn mount_source(mountinfo: &str, path: &Path) -> Option<String> {
    let mut best: Option<(usize, String)> = None;
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let Some(point) = left.split(' ').nth(4) else {
            continue;
        };
        let Some(source) = right.split(' ').nth(1) else {
            continue;
        };
        let point = PathBuf::from(unescape_mountinfo(point));
        if !path.starts_with(&point) {
            continue;
        }
        let depth = point.components().count();
        if best.as_ref().is_none_or(|(d, _)| depth >= *d) {
            best = Some((depth, unescape_mountinfo(source)));
        }
    }
    best.map(|(_, s)| s)
}

/// A `mountinfo` field with its octal escapes (`\040` for a space) undone.
fn unescape_mountinfo(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(v: &[&str]) -> Vec<PathBuf> {
        v.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn the_store_s_mount_source_is_found_in_mountinfo() {
        let info = "\
22 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
90 22 0:55 / /opt/x\\040y/mnt rw,relatime shared:50 - btrfs /dev/loop3 rw,space_cache=v2
91 22 0:56 / /opt/x\\040y/mnt/sub rw shared:51 - tmpfs tmpfs rw
";
        assert_eq!(
            mount_source(info, Path::new("/opt/x y/mnt/store/envs")).as_deref(),
            Some("/dev/loop3")
        );
        assert_eq!(
            mount_source(info, Path::new("/opt/x y/mnt/sub/a")).as_deref(),
            Some("tmpfs")
        );
        assert_eq!(
            mount_source(info, Path::new("/srv")).as_deref(),
            Some("/dev/vda")
        );
        // `/opt/x y/mn` is not below `/opt/x y/mnt`.
        assert_eq!(
            mount_source(info, Path::new("/opt/x y/mn")).as_deref(),
            Some("/dev/vda")
        );
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
