//! An agent's configuration, from the host user's home into the box, on every launch:
//! additive and host-authoritative (a file the host has replaces the box's copy; what only
//! the box's copy has stays), never back.
//!
//! Where the agent's copy lives: **each box keeps its own**, in its home (`/root/.claude`),
//! versioned with the box and removed with it. Nothing writable is shared between boxes
//! (a hook one box's agent plants never runs in another), nothing of a copy is written back
//! to the host, and the host never reads or writes a copy: it is box-controlled.
//!
//! What enters a box is an allow-list ([`super::allow`], [`ConfigPath::include`]): the
//! entries and keys known to carry no credential; everything else is left out and named in
//! [`Synced::dropped`]. The agent reaches its API through the box's credential broker.
//!
//! Two halves, so the host never writes into a box-controlled tree:
//!
//! 1. **Host** ([`stage`]): the agent's [`ConfigPath`]s are mirrored, excludes applied,
//!    symlinks followed (a skill linked from elsewhere arrives as a directory), and the
//!    sanitised files rewritten (see [`super::sanitize`]), into the box's inbox —
//!    `<box dir>/inbox/agent-config/<agent>/home/` — which the box sees read-only at
//!    `/run/agentbox/ctl/agent-config/<agent>/home/`, with its [`Manifest`] next to it. Only
//!    files whose size or mtime differ from the manifest's are copied; files the host no
//!    longer has leave the mirror.
//! 2. **Box** ([`inbox::run`], the hidden [`COMMAND`] of the agentbox binary run as a box
//!    process): the manifest's files are copied over the agent's copy where their size or
//!    mtime differ, except that files in [`MERGED`] are merged with the box's own.
//!
//! A relaunch where nothing changed therefore costs one `stat` per host file, one manifest
//! read and one `stat` per file in the box: nothing is copied or listed twice.
//!
//! One file (over 600 lines, about 210 of them tests): the host half is one pass over the
//! agent's configuration — walk, excludes, sanitising, rehoming, manifest — whose steps
//! share the mirror being built; the box's half is [`inbox`].

pub mod inbox;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use agentbox_core::glob::PathPattern;
use serde::{Deserialize, Serialize};

use super::{Agent, ConfigPath};
use crate::{BoxError, Result};

/// `agentbox __sync-agent-config PLAN` (inside a box; `PLAN` is an [`inbox::Plan`], JSON).
pub const COMMAND: &str = "__sync-agent-config";

/// Files merged key by key with the box's own copy rather than replaced (TOML).
pub const MERGED: &[&str] = &[".codex/config.toml"];

/// Files (per agent) whose text names paths below the host's home, which the box's copy
/// gets below the box's home (`/root`) instead: Claude Code's plugin registries record where
/// each marketplace and plugin is installed (`installLocation`, `installPath`), and without
/// the rewrite it finds none of them in a box.
const REHOMED: &[(&str, &str)] = &[("claude", ".claude/plugins/*.json")];

/// The box's home, which the agents' configuration is copied below.
const BOX_HOME: &str = "/root";

/// How deep symlinked directories are followed (a loop ends there).
const MAX_DEPTH: usize = 64;

/// What a sync copied.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Synced {
    /// Files copied (new or changed).
    pub copied: u64,
    /// Files already up to date.
    pub unchanged: u64,
    /// Files removed from the mirror (host side only).
    pub removed: u64,
    /// Files left out because their name is not UTF-8 (the manifest holds text).
    #[serde(default)]
    pub skipped: u64,
    /// What of the host's configuration was left out because it is not on the agent's
    /// allow-list (host side only): entries (`.claude/backups`) and keys of sanitised files
    /// (`.claude.json:primaryApiKey`), by name, never by value.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<String>,
}

/// One file of the mirror.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Entry {
    /// Relative to the home (`.claude/settings.json`).
    pub path: String,
    pub size: u64,
    /// Modification time (seconds, nanoseconds): the box's copy gets the same.
    pub mtime: i64,
    pub nsec: u32,
    pub mode: u32,
}

/// The mirror's manifest, `<inbox>/agent-config/<agent>/manifest.json`: every file of the
/// mirror with the size, mtime and mode it has there (JSON, `version` 1). Written by the host
/// after the mirror (through a temporary file and a rename), read by the box.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Manifest {
    pub version: u32,
    pub files: Vec<Entry>,
}

/// The directory below a box's inbox holding agent `name`'s mirror.
pub fn stage_dir(inbox: &Path, name: &str) -> PathBuf {
    inbox.join("agent-config").join(name).join("home")
}

/// The manifest of the mirror in `stage` (next to it).
pub fn manifest_file(stage: &Path) -> PathBuf {
    stage.with_file_name("manifest.json")
}

/// Where the box sees [`stage_dir`].
pub fn stage_in_box(name: &str) -> PathBuf {
    PathBuf::from(format!(
        "{}/agent-config/{name}/home",
        crate::types::INBOX_DIR
    ))
}

fn entry_of(path: String, meta: &std::fs::Metadata) -> Entry {
    use std::os::unix::fs::MetadataExt;
    Entry {
        path,
        size: meta.len(),
        mtime: meta.mtime(),
        nsec: u32::try_from(meta.mtime_nsec()).unwrap_or(0),
        mode: meta.mode(),
    }
}

fn entry_of_stat(path: String, st: &rustix::fs::Stat) -> Entry {
    Entry {
        path,
        size: u64::try_from(st.st_size).unwrap_or(0),
        mtime: st.st_mtime,
        nsec: u32::try_from(st.st_mtime_nsec).unwrap_or(0),
        mode: st.st_mode,
    }
}

fn same_entry(a: &Entry, b: &Entry) -> bool {
    a.size == b.size && a.mtime == b.mtime && a.nsec == b.nsec && a.mode == b.mode
}

fn set_mtime(path: &Path, e: &Entry) -> std::io::Result<()> {
    let f = std::fs::File::options().write(true).open(path)?;
    let secs = u64::try_from(e.mtime).unwrap_or(0);
    f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::new(secs, e.nsec))
}

/// Copy `src` to `dst` (replacing whatever `dst` is), keeping its mode and mtime (`e`, what
/// the manifest records). `dst` is in the host-owned mirror.
fn copy_file(src: &Path, dst: &Path, e: &Entry) -> std::io::Result<()> {
    if let Ok(m) = std::fs::symlink_metadata(dst) {
        if m.is_dir() {
            std::fs::remove_dir_all(dst)?;
        } else {
            std::fs::remove_file(dst)?;
        }
    }
    if let Some(parent) = dst.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::copy(src, dst)?;
    set_mtime(dst, e)
}

/// The mirror's last manifest: what is in it, by path (empty when there is none, or it
/// does not parse: then every file is compared with the mirror itself).
fn previous(stage: &Path) -> Option<BTreeMap<String, Entry>> {
    let text = std::fs::read_to_string(manifest_file(stage)).ok()?;
    let m: Manifest = serde_json::from_str(&text).ok()?;
    (m.version == 1).then(|| m.files.into_iter().map(|e| (e.path.clone(), e)).collect())
}

/// Mirror agent `agent`'s configuration from `host_home` into `stage` (the box's inbox
/// mirror), sanitised for project `project`, and write its manifest. Returns what changed.
pub fn stage(
    agent: &Agent,
    host_home: &Path,
    stage: &Path,
    project: Option<&Path>,
) -> Result<Synced> {
    let mut stats = Synced::default();
    let prev = previous(stage);
    let mut files: BTreeMap<String, Entry> = BTreeMap::new();
    // Written below from their sanitised content, not copied.
    let sanitised: BTreeSet<PathBuf> = sanitised_files(&agent.name)
        .iter()
        .map(|(f, _)| PathBuf::from(f))
        .collect();
    let mut ctx = Mirror {
        host_home,
        stage,
        sanitised: &sanitised,
        rehomed: REHOMED
            .iter()
            .filter(|(a, _)| *a == agent.name)
            .filter_map(|(_, p)| PathPattern::new(p))
            .collect(),
        prev: prev.as_ref(),
        files: &mut files,
        stats: &mut stats,
    };
    for c in &agent.config {
        ctx.one(c)?;
    }
    // Sanitised files are written when their content changes.
    for (rel, kind) in sanitised_files(&agent.name) {
        let Ok(text) = fs_err::read_to_string(host_home.join(rel)) else {
            continue;
        };
        let clean = match kind {
            Sanitise::ClaudeJson => super::sanitize::claude_json(&text, project),
            Sanitise::ClaudeSettings => super::sanitize::claude_settings(&text, host_home),
            Sanitise::Codex => super::sanitize::codex_config(&text, host_home),
            Sanitise::OpenCode => super::sanitize::opencode_config(&text),
        };
        match clean {
            Some(clean) => {
                ctx.stats
                    .dropped
                    .extend(clean.dropped.iter().map(|k| format!("{rel}:{k}")));
                ctx.put_text((*rel).to_owned(), &clean.text)?;
            }
            // A file that does not parse cannot be filtered: it stays on the host.
            None => ctx.stats.dropped.push(format!("{rel} (does not parse)")),
        }
    }
    // What the host no longer has leaves the mirror.
    let gone: Vec<PathBuf> = match &prev {
        Some(p) => p
            .keys()
            .filter(|k| !files.contains_key(*k))
            .map(PathBuf::from)
            .collect(),
        None if stage.exists() => walk(stage)?
            .into_iter()
            .filter(|p| p.to_str().is_none_or(|s| !files.contains_key(s)))
            .collect(),
        None => Vec::new(),
    };
    for rel in gone {
        let p = stage.join(&rel);
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file()) {
            fs_err::remove_file(&p)?;
            stats.removed += 1;
        }
    }
    stats.dropped.sort();
    let manifest = Manifest {
        version: 1,
        files: files.into_values().collect(),
    };
    if prev.as_ref().is_none_or(|p| {
        p.len() != manifest.files.len() || manifest.files.iter().any(|e| p.get(&e.path) != Some(e))
    }) {
        // A lost manifest (a crash) only costs the next launch a comparison with the mirror.
        fs_err::create_dir_all(stage)?;
        agentbox_core::atomic::write_json_unsynced(&manifest_file(stage), &manifest)?;
    }
    Ok(stats)
}

/// How a file is sanitised ([`super::sanitize`]).
#[derive(Clone, Copy)]
enum Sanitise {
    ClaudeJson,
    ClaudeSettings,
    Codex,
    OpenCode,
}

/// Agent `agent`'s files (relative to the home) filtered key by key on their way in.
fn sanitised_files(agent: &str) -> &'static [(&'static str, Sanitise)] {
    match agent {
        "claude" => &[
            (".claude.json", Sanitise::ClaudeJson),
            (".claude/settings.json", Sanitise::ClaudeSettings),
        ],
        "codex" => &[(".codex/config.toml", Sanitise::Codex)],
        "opencode" => &[
            (".config/opencode/opencode.json", Sanitise::OpenCode),
            (".config/opencode/opencode.jsonc", Sanitise::OpenCode),
            (".config/opencode/config.json", Sanitise::OpenCode),
        ],
        _ => &[],
    }
}

/// Every regular file below `root`, relative to it (symlinks not followed).
fn walk(root: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut dirs = vec![PathBuf::new()];
    while let Some(rel) = dirs.pop() {
        for e in fs_err::read_dir(root.join(&rel))? {
            let e = e?;
            let r = rel.join(e.file_name());
            let t = e.file_type()?;
            if t.is_dir() {
                dirs.push(r);
            } else if t.is_file() {
                out.push(r);
            }
        }
    }
    Ok(out)
}

fn components(p: &Path) -> Vec<&[u8]> {
    use std::os::unix::ffi::OsStrExt;
    p.components()
        .filter_map(|c| match c {
            std::path::Component::Normal(n) => Some(n.as_bytes()),
            _ => None,
        })
        .collect()
}

impl Mirror<'_> {
    /// Mirror `src` with the host's home in its text replaced by the box's.
    fn rehome(&mut self, src: &Path, key: String) -> Result<()> {
        let text = fs_err::read_to_string(src)?;
        let home = self.host_home.to_string_lossy();
        let home = home.trim_end_matches('/');
        let text = text
            .replace(&format!("{home}/"), &format!("{BOX_HOME}/"))
            .replace(&format!("\"{home}\""), &format!("\"{BOX_HOME}\""));
        self.put_text(key, &text)
    }

    /// Make mirror file `key` (relative to the home) hold `text`: written only when that
    /// changes it.
    fn put_text(&mut self, key: String, text: &str) -> Result<()> {
        let dst = self.stage.join(&key);
        if fs_err::read_to_string(&dst).ok().as_deref() == Some(text) {
            self.stats.unchanged += 1;
        } else {
            if let Some(parent) = dst.parent() {
                fs_err::create_dir_all(parent)?;
            }
            fs_err::write(&dst, text)?;
            self.stats.copied += 1;
        }
        let meta = fs_err::metadata(&dst)?;
        self.files.insert(key.clone(), entry_of(key, &meta));
        Ok(())
    }
}

/// One [`stage`] in progress.
struct Mirror<'a> {
    host_home: &'a Path,
    stage: &'a Path,
    sanitised: &'a BTreeSet<PathBuf>,
    /// Files whose text names paths below the host's home, given the box's home instead.
    rehomed: Vec<PathPattern>,
    prev: Option<&'a BTreeMap<String, Entry>>,
    files: &'a mut BTreeMap<String, Entry>,
    stats: &'a mut Synced,
}

impl Mirror<'_> {
    /// Mirror one configuration path. The host's tree is walked through directory
    /// descriptors (each file stat'ed relative to its directory, not by its whole path: a
    /// relaunch costs one short `stat` per file).
    fn one(&mut self, c: &ConfigPath) -> Result<()> {
        use rustix::fs::{AtFlags, FileType, Mode, OFlags};
        use std::sync::Arc;
        let rel_root = PathBuf::from(c.path.trim_start_matches("~/"));
        let src_root = self.host_home.join(&rel_root);
        let excludes: Vec<PathPattern> = c
            .exclude
            .iter()
            .filter_map(|p| PathPattern::new(p))
            .collect();
        let excluded = |rel: &Path| {
            let comps = components(rel);
            excludes
                .iter()
                .any(|p| (1..=comps.len()).any(|n| p.matches(&comps[..n])))
        };
        /// An entry to look at: below `src_root`, in directory `parent` (`None`: the root
        /// itself), with how many symlinked directories were followed to reach it.
        struct Pending {
            rel: PathBuf,
            parent: Option<Arc<std::os::fd::OwnedFd>>,
            depth: usize,
            linked: bool,
        }
        let root_linked =
            std::fs::symlink_metadata(&src_root).is_ok_and(|m| m.file_type().is_symlink());
        let mut todo = vec![Pending {
            rel: PathBuf::new(),
            parent: None,
            depth: 0,
            linked: root_linked,
        }];
        while let Some(p) = todo.pop() {
            let name = p.rel.file_name().map(std::ffi::OsStr::to_owned);
            // Followed: a symlink (a skill linked from elsewhere) arrives as what it names.
            let st = match (&p.parent, &name) {
                (Some(dir), Some(n)) => rustix::fs::statat(dir, n, AtFlags::empty()),
                _ => rustix::fs::stat(&src_root),
            };
            let Ok(st) = st else { continue };
            if !p.rel.as_os_str().is_empty() && excluded(&p.rel) {
                continue;
            }
            // Directly below a directory root: only what the agent's allow-list names.
            if let (Some(include), Some(n), 1) = (&c.include, &name, p.rel.components().count()) {
                if !include.iter().any(|i| std::ffi::OsStr::new(i) == n) {
                    self.stats
                        .dropped
                        .push(rel_root.join(&p.rel).to_string_lossy().into_owned());
                    continue;
                }
            }
            match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => {
                    let depth = p.depth + usize::from(p.linked);
                    if depth > MAX_DEPTH {
                        continue;
                    }
                    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
                    let fd = match (&p.parent, &name) {
                        (Some(dir), Some(n)) => rustix::fs::openat(dir, n, flags, Mode::empty()),
                        _ => rustix::fs::open(&src_root, flags, Mode::empty()),
                    };
                    let Ok(fd) = fd else { continue };
                    let Ok(entries) = rustix::fs::Dir::read_from(&fd) else {
                        continue;
                    };
                    let fd = Arc::new(fd);
                    for e in entries.flatten() {
                        let n = e.file_name().to_bytes();
                        if n == b"." || n == b".." {
                            continue;
                        }
                        let n = std::ffi::OsStr::from_bytes(n);
                        let linked = match e.file_type() {
                            FileType::Symlink => true,
                            FileType::Unknown => {
                                rustix::fs::statat(&*fd, n, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(
                                    |s| FileType::from_raw_mode(s.st_mode) == FileType::Symlink,
                                )
                            }
                            _ => false,
                        };
                        todo.push(Pending {
                            rel: p.rel.join(n),
                            parent: Some(fd.clone()),
                            depth,
                            linked,
                        });
                    }
                }
                FileType::RegularFile => {
                    let out_rel = if p.rel.as_os_str().is_empty() {
                        rel_root.clone()
                    } else {
                        rel_root.join(&p.rel)
                    };
                    if self.sanitised.contains(&out_rel) {
                        continue;
                    }
                    let Some(key) = out_rel.to_str().map(str::to_owned) else {
                        self.stats.skipped += 1;
                        continue;
                    };
                    let dst = self.stage.join(&out_rel);
                    let comps = components(&out_rel);
                    if self.rehomed.iter().any(|p| p.matches(&comps)) {
                        self.rehome(&src_root.join(&p.rel), key)?;
                        continue;
                    }
                    let now = entry_of_stat(key.clone(), &st);
                    // The mirror is the host's own (read-only in boxes): its manifest is
                    // trusted.
                    let known = match self.prev {
                        Some(prev) => prev.get(&key).is_some_and(|e| same_entry(e, &now)),
                        None => std::fs::symlink_metadata(&dst).is_ok_and(|d| {
                            d.is_file() && same_entry(&entry_of(String::new(), &d), &now)
                        }),
                    };
                    if known {
                        self.stats.unchanged += 1;
                    } else {
                        // `join("")` would add a trailing `/`, which a file's path cannot take.
                        let src = if p.rel.as_os_str().is_empty() {
                            src_root.clone()
                        } else {
                            src_root.join(&p.rel)
                        };
                        copy_file(&src, &dst, &now).map_err(|e| BoxError::io(&dst, e))?;
                        self.stats.copied += 1;
                    }
                    self.files.insert(key, now);
                }
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(p: &Path, s: &str) {
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, s).expect("write");
    }

    #[test]
    fn the_mirror_follows_the_host_with_excludes_and_sanitising() {
        let t = tempfile::tempdir().expect("tmp");
        let host = t.path().join("home");
        write(
            &host.join(".claude/settings.json"),
            r#"{"hooks":{"Stop":[{"hooks":[{"command":"HOST/bin/x"}]}]}}"#
                .replace("HOST", &host.to_string_lossy())
                .as_str(),
        );
        write(&host.join(".claude/.credentials.json"), "secret");
        write(
            &host.join(".claude/plugins/p/node_modules/a.node"),
            "darwin",
        );
        write(&host.join(".claude/agents/a.md"), "agent");
        write(&host.join(".agents-src/skills/s/SKILL.md"), "skill");
        std::fs::create_dir_all(host.join(".claude/skills")).expect("mkdir");
        std::os::unix::fs::symlink(
            host.join(".agents-src/skills/s"),
            host.join(".claude/skills/s"),
        )
        .expect("symlink");
        write(&host.join(".claude.json"), r#"{"installMethod":"native"}"#);
        write(
            &host.join(".claude/plugins/known_marketplaces.json"),
            &r#"{"m":{"installLocation":"HOST/.claude/plugins/marketplaces/m"}}"#
                .replace("HOST", &host.to_string_lossy()),
        );
        let agent = super::super::builtin().remove(0);
        let stage_dir = t.path().join("stage");
        let first = stage(&agent, &host, &stage_dir, None).expect("stage");
        assert_eq!(
            std::fs::read_to_string(stage_dir.join(".claude/plugins/known_marketplaces.json"))
                .expect("mirrored"),
            r#"{"m":{"installLocation":"/root/.claude/plugins/marketplaces/m"}}"#,
            "the plugin registry names the box's home"
        );
        assert!(first.copied >= 4, "{first:?}");
        let read = |p: &str| std::fs::read_to_string(stage_dir.join(p)).ok();
        assert_eq!(
            read(".claude/.credentials.json"),
            None,
            "a credential never leaves the host"
        );
        assert_eq!(read(".claude/plugins/p/node_modules/a.node"), None);
        assert_eq!(
            read(".claude/skills/s/SKILL.md").as_deref(),
            Some("skill"),
            "symlink followed"
        );
        assert_eq!(
            read(".claude.json").map(|s| s.contains("installMethod")),
            Some(false)
        );
        assert_eq!(
            read(".claude/settings.json").map(|s| s.contains("bin/x")),
            Some(false)
        );
        // Nothing changed: nothing copied.
        let again = stage(&agent, &host, &stage_dir, None).expect("stage");
        assert_eq!(again.copied, 0, "{again:?}");
        // A file the host removed leaves the mirror.
        std::fs::remove_file(host.join(".claude/agents/a.md")).expect("rm");
        let after = stage(&agent, &host, &stage_dir, None).expect("stage");
        assert_eq!(after.removed, 1);
        assert_eq!(read(".claude/agents/a.md"), None);

        // The box's half, into the box's own copy: host wins, box-only files stay.
        let boxed = t.path().join("boxroot");
        write(&boxed.join(".claude/projects/log.jsonl"), "box history");
        write(&boxed.join(".claude.json"), "{}");
        let plan = || inbox::Plan {
            mirror: stage_dir.clone(),
            manifest: manifest_file(&stage_dir),
            home: boxed.clone(),
            roots: vec![".claude".into(), ".claude.json".into()],
        };
        let s = inbox::run(&plan()).expect("inside");
        assert!(s.synced.copied >= 3, "{s:?}");
        assert_eq!(
            std::fs::read_to_string(boxed.join(".claude/projects/log.jsonl")).expect("kept"),
            "box history"
        );
        assert!(std::fs::read_to_string(boxed.join(".claude.json"))
            .expect("read")
            .contains('{'));
        let s2 = inbox::run(&plan()).expect("inside");
        assert_eq!(s2.synced.copied, 0);
        // A box-side edit of a host file is undone by the next launch.
        write(&boxed.join(".claude/agents/b.md"), "box edit");
        std::fs::write(host.join(".claude/agents/b.md"), "host").expect("write");
        stage(&agent, &host, &stage_dir, None).expect("stage");
        inbox::run(&plan()).expect("inside");
        assert_eq!(
            std::fs::read_to_string(boxed.join(".claude/agents/b.md")).expect("read"),
            "host"
        );
    }

    #[test]
    fn the_boxs_copy_is_written_below_its_home_through_no_planted_symlink() {
        let t = tempfile::tempdir().expect("tmp");
        let host = t.path().join("home");
        write(&host.join(".claude/agents/a.md"), "agent");
        write(&host.join(".claude/commands/c.md"), "command");
        write(&host.join(".claude.json"), "{}");
        let agent = super::super::builtin().remove(0);
        let stage_dir = t.path().join("stage");
        stage(&agent, &host, &stage_dir, None).expect("stage");
        let outside = t.path().join("outside");
        std::fs::create_dir_all(&outside).expect("mkdir");
        let boxed = t.path().join("box");
        // The box planted symlinks where the host's files go (a link of an earlier version
        // to the shared copy is one too): a directory, a file, and the whole root.
        std::fs::create_dir_all(boxed.join(".claude")).expect("mkdir");
        std::os::unix::fs::symlink(&outside, boxed.join(".claude/agents")).expect("ln");
        std::os::unix::fs::symlink(outside.join("victim"), boxed.join(".claude/commands"))
            .expect("ln");
        std::os::unix::fs::symlink(outside.join("cj"), boxed.join(".claude.json")).expect("ln");
        let plan = inbox::Plan {
            mirror: stage_dir.clone(),
            manifest: manifest_file(&stage_dir),
            home: boxed.clone(),
            roots: vec![".claude".into(), ".claude.json".into()],
        };
        inbox::run(&plan).expect("run");
        assert_eq!(
            std::fs::read_dir(&outside).expect("ls").count(),
            0,
            "nothing written through a planted symlink"
        );
        for p in [".claude/agents", ".claude/commands", ".claude.json"] {
            assert!(
                !std::fs::symlink_metadata(boxed.join(p))
                    .expect("stat")
                    .file_type()
                    .is_symlink(),
                "{p} replaced"
            );
        }
        assert_eq!(
            std::fs::read_to_string(boxed.join(".claude/agents/a.md")).expect("read"),
            "agent"
        );
        // The whole root a symlink: replaced by a directory, never followed.
        std::fs::remove_dir_all(boxed.join(".claude")).expect("rm");
        std::os::unix::fs::symlink(&outside, boxed.join(".claude")).expect("ln");
        stage(&agent, &host, &stage_dir, None).expect("stage");
        std::fs::write(host.join(".claude/agents/a.md"), "agent v2").expect("write");
        stage(&agent, &host, &stage_dir, None).expect("stage");
        inbox::run(&plan).expect("run");
        assert_eq!(std::fs::read_dir(&outside).expect("ls").count(), 0);
        assert!(boxed.join(".claude").is_dir() && !boxed.join(".claude").is_symlink());
    }

    #[test]
    fn credentials_and_unlisted_entries_never_reach_the_mirror_and_are_named() {
        let t = tempfile::tempdir().expect("tmp");
        let host = t.path().join("home");
        write(
            &host.join(".claude.json"),
            r#"{"theme":"dark","primaryApiKey":"SECRET1","oauthAccount":{"accessToken":"SECRET2"}}"#,
        );
        write(
            &host.join(".claude/backups/.claude.json.backup.1"),
            "SECRET1",
        );
        write(&host.join(".claude/.credentials.json"), "SECRET3");
        write(&host.join(".claude/projects/p/t.jsonl"), "transcript");
        write(
            &host.join(".claude/settings.json"),
            r#"{"model":"opus","apiKeyHelper":"echo SECRET4","env":{"ANTHROPIC_AUTH_TOKEN":"SECRET5","BASH_DEFAULT_TIMEOUT_MS":"1"}}"#,
        );
        let agent = super::super::builtin().remove(0);
        let stage_dir = t.path().join("stage");
        let s = stage(&agent, &host, &stage_dir, None).expect("stage");
        assert_eq!(
            s.dropped,
            [
                ".claude.json:oauthAccount",
                ".claude.json:primaryApiKey",
                ".claude/.credentials.json",
                ".claude/backups",
                ".claude/projects",
                ".claude/settings.json:apiKeyHelper",
                ".claude/settings.json:env.ANTHROPIC_AUTH_TOKEN",
            ]
        );
        for f in walk(&stage_dir).expect("walk") {
            let text = std::fs::read_to_string(stage_dir.join(&f)).expect("read");
            assert!(!text.contains("SECRET"), "{}: {text}", f.display());
        }
        let settings =
            std::fs::read_to_string(stage_dir.join(".claude/settings.json")).expect("read");
        assert!(settings.contains("opus") && settings.contains("BASH_DEFAULT_TIMEOUT_MS"));
        // A sanitised file that does not parse stays on the host.
        write(&host.join(".claude.json"), "{ not json SECRET6");
        let s = stage(&agent, &host, &stage_dir, None).expect("stage");
        assert!(s
            .dropped
            .contains(&".claude.json (does not parse)".to_owned()));
        assert!(!stage_dir.join(".claude.json").exists());
    }
}
