//! The host user's home in a box: which of its toolchains and caches are shown again
//! ([`HOME_TOOLS`], [`HOME_CACHES`], `box.homeTools`), which of its files never are
//! ([`HOME_SECRETS`]), whose home it is ([`host_user_home`]), and the variables that point
//! the toolchains at it when it is not the box's `HOME` ([`TOOL_ENV`]).

use std::path::{Component, Path, PathBuf};

/// The toolchains of the host user's home a box sees, at their host paths (relative to the
/// home): what `rustup`, `pyenv`, `nvm`, `volta`, `bun`, `deno`, `go install` and the agents'
/// own installers put there, so that `cargo`, `python`, `node` and `claude` work in a box as
/// on the host.
pub const HOME_TOOLS: &[&str] = &[
    ".cargo",
    ".rustup",
    ".pyenv",
    ".nvm",
    ".volta",
    ".bun",
    ".deno",
    "go",
    ".local/bin",
    ".local/share/claude",
    ".opencode/bin",
];

/// The host user's package caches a box reads (relative to the home), so that an install in
/// a box does not download again what the host has; the box's writes stay in its layer.
pub const HOME_CACHES: &[&str] = &[
    ".npm/_cacache",
    ".cache/pip",
    ".cargo/registry",
    ".cargo/git",
    ".cache/go-build",
    "go/pkg/mod",
    ".cache/yarn",
    ".local/share/pnpm/store",
];

/// Credentials in the host user's home (relative to it): never in a box, even below a
/// shown directory (`~/.cargo/credentials.toml` inside the shown `~/.cargo`) or one that
/// `box.homeTools` names.
pub const HOME_SECRETS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker",
    ".config/gh",
    ".config/hub",
    ".config/git/credentials",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".pgpass",
    ".vault-token",
    ".password-store",
    ".local/share/keyrings",
    ".gem/credentials",
    ".terraform.d/credentials.tfrc.json",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    // Agents' credential files.
    ".claude/.credentials.json",
    ".codex/auth.json",
    ".local/share/opencode/auth.json",
];

/// Secrets named by a prefix: every entry of the directory (relative to the home) whose
/// name starts with it (`~/.cargo/credentials*`: cargo's tokens, and copies of them).
const HOME_SECRET_PREFIXES: &[(&str, &str)] = &[(".cargo", "credentials")];

/// One `box.homeTools` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HomeTool {
    /// `PATH` (or `~/PATH`): shown too.
    Show(PathBuf),
    /// `!PATH`: one of the defaults ([`HOME_TOOLS`], [`HOME_CACHES`]) not shown.
    Drop(PathBuf),
}

/// Parse a `box.homeTools` entry: a path below the host user's home (`.cargo`,
/// `~/.local/bin`), `!` in front to leave out a default. Refuses one that is, or is below,
/// one of [`HOME_SECRETS`].
pub fn parse_home_tool(entry: &str) -> Result<HomeTool, String> {
    let (drop, path) = match entry.strip_prefix('!') {
        Some(p) => (true, p),
        None => (false, entry),
    };
    let path = path.strip_prefix("~/").unwrap_or(path);
    if path == "~" {
        return Err(format!(
            "{entry:?} is the whole home, which a box never sees (name the directories below it, like .cargo or ~/.local/bin)"
        ));
    }
    let rel = Path::new(path);
    let plain = !path.is_empty() && rel.components().all(|c| matches!(c, Component::Normal(_)));
    if !plain {
        return Err(format!(
            "{entry:?} is not a path below the home without `.` or `..`, like .cargo or ~/.local/bin (prefix it with ! to leave out a default)"
        ));
    }
    let rel: PathBuf = rel.components().collect();
    if drop {
        return Ok(HomeTool::Drop(rel));
    }
    if let Some(secret) = home_secret_of(&rel) {
        return Err(format!(
            "~/{} holds secrets (~/{secret}), which a box never sees",
            rel.display()
        ));
    }
    Ok(HomeTool::Show(rel))
}

/// The home secret `rel` (relative to the home) is or is below, if any.
fn home_secret_of(rel: &Path) -> Option<String> {
    if let Some(s) = HOME_SECRETS.iter().find(|s| rel.starts_with(s)) {
        return Some((*s).to_owned());
    }
    HOME_SECRET_PREFIXES.iter().find_map(|(dir, prefix)| {
        let below = rel.strip_prefix(dir).ok()?;
        let name = below.components().next()?.as_os_str().to_str()?;
        name.starts_with(prefix).then(|| format!("{dir}/{prefix}*"))
    })
}

/// The home paths (relative) a box shows: the defaults, less what `entries` leave out
/// (`!PATH`), plus what they add. Entries that do not parse are skipped (they were checked
/// when the configuration was read; a record written by hand says so in the log).
pub fn home_tool_paths(entries: &[String]) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = HOME_TOOLS
        .iter()
        .chain(HOME_CACHES)
        .map(PathBuf::from)
        .collect();
    for entry in entries {
        match parse_home_tool(entry) {
            Ok(HomeTool::Show(p)) => {
                if !paths.contains(&p) {
                    paths.push(p);
                }
            }
            Ok(HomeTool::Drop(p)) => paths.retain(|q| *q != p),
            Err(e) => eprintln!("box.homeTools: {e}; ignored"),
        }
    }
    paths
}

/// The home of the host user, the one who runs agentbox: under `sudo`, `SUDO_USER`'s
/// (from `/etc/passwd`), else `$HOME` (so root's is `/root` unless `HOME` says otherwise —
/// which lets a test point agentbox at a home of its own), else the effective user's
/// entry in `/etc/passwd`.
pub fn host_user_home() -> Option<PathBuf> {
    let euid = rustix::process::geteuid();
    if euid.is_root() {
        let sudo_user = std::env::var("SUDO_USER").ok().filter(|u| !u.is_empty());
        if let Some(home) = sudo_user
            .filter(|u| u != "root")
            .and_then(|u| passwd_home(|name, _| name == u))
        {
            return Some(home);
        }
    }
    let usable = |h: &Path| h.is_absolute() && h != Path::new("/");
    if let Some(home) = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| usable(h))
    {
        return Some(home);
    }
    passwd_home(|_, uid| uid == euid.as_raw()).filter(|h| usable(h))
}

/// The home directory of the first `/etc/passwd` entry `matches` (name, uid) holds for.
fn passwd_home(matches: impl Fn(&str, u32) -> bool) -> Option<PathBuf> {
    let text = fs_err::read_to_string("/etc/passwd").ok()?;
    text.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        let (name, uid, home) = (fields.first()?, fields.get(2)?, fields.get(5)?);
        let uid = uid.parse::<u32>().ok()?;
        (matches(name, uid) && !home.is_empty()).then(|| PathBuf::from(home))
    })
}

/// The box's `HOME`.
const BOX_HOME: &str = "/root";

/// The variables that tell a toolchain where its home is, when it is not below `$HOME`
/// (relative to the host user's home): a box's `HOME` is `/root`, so `rustup`'s proxies
/// look for `~/.rustup` there unless `RUSTUP_HOME` says where the host user's is.
pub const TOOL_ENV: &[(&str, &str)] = &[
    (".cargo", "CARGO_HOME"),
    (".rustup", "RUSTUP_HOME"),
    (".pyenv", "PYENV_ROOT"),
    (".nvm", "NVM_DIR"),
    (".volta", "VOLTA_HOME"),
    (".bun", "BUN_INSTALL"),
    (".deno", "DENO_INSTALL"),
    ("go", "GOPATH"),
    (".npm/_cacache", "npm_config_cache"),
    (".cache/pip", "PIP_CACHE_DIR"),
    (".cache/go-build", "GOCACHE"),
    (".cache/yarn", "YARN_CACHE_FOLDER"),
    (".local/share/pnpm/store", "npm_config_store_dir"),
];

/// [`TOOL_ENV`] for the shown paths of a host user whose home is `user_home`: none when it
/// is the box's own `HOME`, where the toolchains look anyway. npm's variable names its
/// cache's parent (`~/.npm`), which holds `_cacache`.
pub(super) fn tool_env(user_home: &Path, show: &[PathBuf]) -> Vec<(String, String)> {
    let h = fs_err::canonicalize(user_home).unwrap_or_else(|_| user_home.to_owned());
    if h == Path::new(BOX_HOME) {
        return Vec::new();
    }
    TOOL_ENV
        .iter()
        .filter(|(rel, _)| show.contains(&h.join(rel)))
        .map(|(rel, var)| {
            let at = h.join(rel);
            let at = match *var {
                "npm_config_cache" => at.parent().map(Path::to_owned).unwrap_or(at),
                _ => at,
            };
            ((*var).to_owned(), at.to_string_lossy().into_owned())
        })
        .collect()
}

/// The host user's toolchains and caches below `user_home` a box shows (`entries`: its
/// `box.homeTools`), and the secrets hidden inside them: [`HOME_SECRETS`] (also where a
/// shown path is a symlink, at its target) and the entries of `~/.cargo` named
/// `credentials*`. A tool at or below one of `never_shown` (the agentbox home, the
/// project) is not shown, nor one that is missing.
pub(super) fn home_tools(
    user_home: &Path,
    entries: &[String],
    never_shown: &[PathBuf],
) -> (Vec<PathBuf>, Vec<PathBuf>) {
    // Paths in the box are the host's real ones: a home reached through a symlink is shown
    // where it really is (an overlay does not follow symlinks on its way down).
    let h = fs_err::canonicalize(user_home).unwrap_or_else(|_| user_home.to_owned());
    let listed: Vec<PathBuf> = entries
        .iter()
        .filter_map(|e| match parse_home_tool(e) {
            Ok(HomeTool::Show(p)) => Some(p),
            _ => None,
        })
        .collect();
    let mut hidden: Vec<PathBuf> = HOME_SECRETS.iter().map(|s| h.join(s)).collect();
    for (dir, prefix) in HOME_SECRET_PREFIXES {
        if let Ok(found) = fs_err::read_dir(h.join(dir)) {
            hidden.extend(
                found
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
                    .map(|e| e.path()),
            );
        }
    }
    let mut show = Vec::new();
    for rel in home_tool_paths(entries) {
        let at = h.join(&rel);
        // A tool that is a symlink shows its target too (where the files are), with the
        // secrets that would be below it hidden there.
        let target = fs_err::canonicalize(&at).ok().filter(|t| *t != at);
        if !at.exists() {
            continue;
        }
        let secret = |p: &Path| {
            never_shown
                .iter()
                .find(|s| p.starts_with(s))
                .cloned()
                .or_else(|| {
                    p.strip_prefix(&h)
                        .ok()
                        .and_then(home_secret_of)
                        .map(|s| h.join(s))
                })
        };
        let candidates: Vec<PathBuf> = std::iter::once(at.clone()).chain(target.clone()).collect();
        if let Some(s) = candidates.iter().find_map(|c| secret(c)) {
            // Only an entry the user wrote is worth a word; a default below a secret (the
            // agentbox home as the user's home) is simply not shown.
            if listed.contains(&rel) {
                eprintln!(
                    "box.homeTools: {} holds secrets ({}); it stays hidden",
                    at.display(),
                    s.display()
                );
            }
            continue;
        }
        if let Some(t) = &target {
            for s in HOME_SECRETS {
                if let Ok(below) = Path::new(s).strip_prefix(&rel) {
                    hidden.push(t.join(below));
                }
            }
            for (dir, prefix) in HOME_SECRET_PREFIXES {
                if Path::new(dir) == rel {
                    if let Ok(found) = fs_err::read_dir(t) {
                        hidden.extend(
                            found
                                .flatten()
                                .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
                                .map(|e| e.path()),
                        );
                    }
                }
            }
        }
        show.extend(candidates);
    }
    show.sort();
    show.dedup();
    (show, hidden)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_tools_parse_and_credentials_are_refused() {
        assert_eq!(
            parse_home_tool("~/.local/share/mytool"),
            Ok(HomeTool::Show(".local/share/mytool".into()))
        );
        assert_eq!(
            parse_home_tool(".sdkman"),
            Ok(HomeTool::Show(".sdkman".into()))
        );
        assert_eq!(
            parse_home_tool("!.pyenv"),
            Ok(HomeTool::Drop(".pyenv".into()))
        );
        for bad in [
            "",
            "~",
            "~/",
            "/root/.cargo",
            "../x",
            ".cargo/../.ssh",
            "./x",
        ] {
            assert!(parse_home_tool(bad).is_err(), "{bad:?}");
        }
        for secret in [
            ".ssh",
            ".ssh/config",
            "~/.aws",
            ".config/gcloud",
            ".cargo/credentials.toml",
            ".cargo/credentials-old",
            ".claude/.credentials.json",
            ".local/share/opencode/auth.json",
        ] {
            assert!(
                parse_home_tool(secret)
                    .expect_err(secret)
                    .contains("secrets"),
                "{secret}"
            );
        }
        // An ancestor of a secret may be shown: the secret stays hidden below it.
        assert!(parse_home_tool(".config").is_ok());
        assert!(parse_home_tool(".claude").is_ok());
    }

    #[test]
    fn the_defaults_are_shown_less_what_is_left_out_plus_what_is_added() {
        let paths = home_tool_paths(&["!.pyenv".into(), ".sdkman".into(), ".cargo".into()]);
        assert!(paths.contains(&PathBuf::from(".cargo")));
        assert!(paths.contains(&PathBuf::from(".npm/_cacache")));
        assert!(paths.contains(&PathBuf::from(".sdkman")));
        assert!(!paths.contains(&PathBuf::from(".pyenv")));
        assert_eq!(
            paths.iter().filter(|p| *p == Path::new(".cargo")).count(),
            1
        );
    }

    #[test]
    fn tools_that_exist_are_shown_with_the_credentials_below_them_hidden() {
        let dir = tempfile::tempdir().expect("tempdir");
        let h = fs_err::canonicalize(dir.path()).expect("canonical");
        for d in [
            ".cargo/bin",
            ".local/bin",
            ".ssh",
            "tools/pyenv",
            ".agentbox",
        ] {
            fs_err::create_dir_all(h.join(d)).expect("mkdir");
        }
        fs_err::write(h.join(".cargo/credentials.toml"), "t").expect("write");
        fs_err::write(h.join(".cargo/credentials.bak"), "t").expect("write");
        // A tool that is a symlink: its target is shown too.
        std::os::unix::fs::symlink(h.join("tools/pyenv"), h.join(".pyenv")).expect("symlink");
        // A tool listed below the agentbox home is not shown.
        let (show, hidden) = home_tools(
            &h,
            &[".agentbox/x".into(), ".config".into()],
            &[h.join(".agentbox")],
        );
        assert_eq!(
            show,
            [
                h.join(".cargo"),
                h.join(".local/bin"),
                h.join(".pyenv"),
                h.join("tools/pyenv"),
            ]
        );
        for p in [
            ".ssh",
            ".cargo/credentials",
            ".cargo/credentials.toml",
            ".cargo/credentials.bak",
            ".codex/auth.json",
        ] {
            assert!(hidden.contains(&h.join(p)), "{p}");
        }
    }
}
