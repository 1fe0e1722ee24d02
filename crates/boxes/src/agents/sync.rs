//! An agent's configuration, from the host user's home into the box's home (`/root`), on
//! every launch: additive and host-authoritative (a file the host has replaces the box's;
//! what only the box has stays), never back.
//!
//! Two halves, so the host never writes into a box's (box-controlled) tree:
//!
//! 1. **Host** ([`stage`]): the agent's [`ConfigPath`]s are mirrored, excludes applied,
//!    symlinks followed (a skill linked from elsewhere arrives as a directory), and the
//!    sanitised files rewritten (see [`super::sanitize`]), into the box's inbox —
//!    `<box dir>/inbox/agent-config/<agent>/home/` — which the box sees read-only at
//!    `/run/agentbox/ctl/agent-config/<agent>/home/`. A file whose size and mtime match is
//!    not copied again, and files the host no longer has leave the mirror.
//! 2. **Box** ([`inside`], the hidden [`COMMAND`] of the agentbox binary run as a box
//!    process): the mirror is copied over the box's home the same way (size and mtime),
//!    except that files in [`MERGED`] are merged with the box's own.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use agentbox_core::glob::PathPattern;

use super::{Agent, ConfigPath};
use crate::{BoxError, Result};

/// `agentbox __sync-agent-config SRC DST` (inside a box).
pub const COMMAND: &str = "__sync-agent-config";

/// Files merged key by key with the box's own copy rather than replaced (TOML).
pub const MERGED: &[&str] = &[".codex/config.toml"];

/// How deep symlinked directories are followed (a loop ends there).
const MAX_DEPTH: usize = 64;

/// What a sync copied.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Synced {
    /// Files copied (new or changed).
    pub copied: u64,
    /// Files already up to date.
    pub unchanged: u64,
    /// Files removed from the mirror (host side only).
    pub removed: u64,
}

/// The directory below a box's inbox holding agent `name`'s mirror.
pub fn stage_dir(inbox: &Path, name: &str) -> PathBuf {
    inbox.join("agent-config").join(name).join("home")
}

/// Where the box sees [`stage_dir`].
pub fn stage_in_box(name: &str) -> String {
    format!("{}/agent-config/{name}/home", crate::record::INBOX_DIR)
}

fn same(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.len() == b.len() && a.mtime() == b.mtime() && a.mtime_nsec() == b.mtime_nsec()
}

fn set_mtime(path: &Path, meta: &std::fs::Metadata) -> std::io::Result<()> {
    let f = std::fs::File::options().write(true).open(path)?;
    f.set_modified(meta.modified()?)
}

/// Copy `src` to `dst` (replacing whatever `dst` is), keeping its mode and mtime.
fn copy_file(src: &Path, dst: &Path, meta: &std::fs::Metadata) -> std::io::Result<()> {
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
    set_mtime(dst, meta)
}

/// Mirror agent `agent`'s configuration from `host_home` into `stage` (the box's inbox
/// mirror), sanitised for project `project`. Returns what changed.
pub fn stage(
    agent: &Agent,
    host_home: &Path,
    stage: &Path,
    project: Option<&Path>,
) -> Result<Synced> {
    let mut stats = Synced::default();
    let mut wanted = BTreeSet::new();
    // Written below from their sanitised content, not copied.
    let sanitised: BTreeSet<PathBuf> = match agent.name.as_str() {
        "claude" => [".claude.json", ".claude/settings.json"].as_slice(),
        "codex" => [".codex/config.toml"].as_slice(),
        _ => [].as_slice(),
    }
    .iter()
    .map(PathBuf::from)
    .collect();
    for c in &agent.config {
        mirror_one(c, host_home, stage, &sanitised, &mut wanted, &mut stats)?;
    }
    // Sanitised files are written when their content changes.
    let stats_copied = std::cell::Cell::new(0u64);
    let rewrite = |rel: &str, f: &dyn Fn(&str) -> Option<String>| -> Result<()> {
        let src = host_home.join(rel);
        let dst = stage.join(rel);
        if let Ok(text) = fs_err::read_to_string(&src) {
            // A file that does not parse is passed on as it is.
            let clean = f(&text).unwrap_or(text);
            if fs_err::read_to_string(&dst).ok().as_deref() != Some(clean.as_str()) {
                if let Some(parent) = dst.parent() {
                    fs_err::create_dir_all(parent)?;
                }
                fs_err::write(&dst, clean)?;
                stats_copied.set(stats_copied.get() + 1);
            }
        }
        Ok(())
    };
    if agent.name == "claude" {
        rewrite(".claude.json", &|t| {
            super::sanitize::claude_json(t, project)
        })?;
        rewrite(".claude/settings.json", &|t| {
            super::sanitize::claude_settings(t, host_home)
        })?;
    }
    if agent.name == "codex" {
        rewrite(".codex/config.toml", &|t| {
            super::sanitize::codex_config(t, host_home)
        })?;
    }
    stats.copied += stats_copied.get();
    // What the host no longer has leaves the mirror.
    if stage.exists() {
        for entry in walk(stage)? {
            if !wanted.contains(&entry) {
                let p = stage.join(&entry);
                if p.is_file() {
                    fs_err::remove_file(&p)?;
                    stats.removed += 1;
                }
            }
        }
    }
    Ok(stats)
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

fn mirror_one(
    c: &ConfigPath,
    host_home: &Path,
    stage: &Path,
    sanitised: &BTreeSet<PathBuf>,
    wanted: &mut BTreeSet<PathBuf>,
    stats: &mut Synced,
) -> Result<()> {
    let rel_root = PathBuf::from(c.path.trim_start_matches("~/"));
    let src_root = host_home.join(&rel_root);
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
    // (path below src_root, depth of symlinked directories followed)
    let mut todo = vec![(PathBuf::new(), 0usize)];
    while let Some((rel, depth)) = todo.pop() {
        // `join("")` would add a trailing `/`, which a file's path cannot take.
        let src = if rel.as_os_str().is_empty() {
            src_root.clone()
        } else {
            src_root.join(&rel)
        };
        // Followed: a symlink (a skill linked from elsewhere) arrives as what it names.
        let Ok(meta) = std::fs::metadata(&src) else {
            continue;
        };
        if !rel.as_os_str().is_empty() && excluded(&rel) {
            continue;
        }
        if meta.is_dir() {
            let linked = std::fs::symlink_metadata(&src).is_ok_and(|m| m.file_type().is_symlink());
            let depth = depth + usize::from(linked);
            if depth > MAX_DEPTH {
                continue;
            }
            let Ok(rd) = fs_err::read_dir(&src) else {
                continue;
            };
            for e in rd.flatten() {
                todo.push((rel.join(e.file_name()), depth));
            }
        } else if meta.is_file() {
            // `join("")` would add a trailing `/` to a file's own path.
            let out_rel = if rel.as_os_str().is_empty() {
                rel_root.clone()
            } else {
                rel_root.join(&rel)
            };
            let dst = stage.join(&out_rel);
            let skip = sanitised.contains(&out_rel);
            wanted.insert(out_rel);
            if skip {
                continue;
            }
            match std::fs::symlink_metadata(&dst) {
                Ok(d) if d.is_file() && same(&meta, &d) => stats.unchanged += 1,
                _ => {
                    copy_file(&src, &dst, &meta).map_err(|e| BoxError::io(&dst, e))?;
                    stats.copied += 1;
                }
            }
        }
    }
    Ok(())
}

/// The in-box half: copy the mirror at `src` over the box's home `dst` (see the module
/// documentation). Run inside the box.
pub fn inside(src: &Path, dst: &Path) -> std::result::Result<Synced, String> {
    let mut stats = Synced::default();
    let files = walk(src).map_err(|e| e.to_string())?;
    for rel in files {
        let from = src.join(&rel);
        let to = dst.join(&rel);
        let meta = std::fs::metadata(&from).map_err(|e| format!("{}: {e}", from.display()))?;
        if MERGED.iter().any(|m| Path::new(m) == rel) {
            if let Ok(boxed) = std::fs::read_to_string(&to) {
                let host = std::fs::read_to_string(&from)
                    .map_err(|e| format!("{}: {e}", from.display()))?;
                if let Some(merged) = super::sanitize::merge_toml(&host, &boxed) {
                    if merged != boxed {
                        std::fs::write(&to, merged)
                            .map_err(|e| format!("{}: {e}", to.display()))?;
                        stats.copied += 1;
                    } else {
                        stats.unchanged += 1;
                    }
                    continue;
                }
            }
        }
        match std::fs::symlink_metadata(&to) {
            Ok(d) if d.is_file() && same(&meta, &d) => stats.unchanged += 1,
            _ => {
                copy_file(&from, &to, &meta).map_err(|e| format!("{}: {e}", to.display()))?;
                stats.copied += 1;
            }
        }
    }
    Ok(stats)
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
        let agent = super::super::builtin().remove(0);
        let stage_dir = t.path().join("stage");
        let first = stage(&agent, &host, &stage_dir, None).expect("stage");
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

        // The box's half: host wins, box-only files stay.
        let boxed = t.path().join("boxroot");
        write(&boxed.join(".claude/projects/log.jsonl"), "box history");
        write(&boxed.join(".claude.json"), "{}");
        let s = inside(&stage_dir, &boxed).expect("inside");
        assert!(s.copied >= 3, "{s:?}");
        assert_eq!(
            std::fs::read_to_string(boxed.join(".claude/projects/log.jsonl")).expect("kept"),
            "box history"
        );
        assert!(std::fs::read_to_string(boxed.join(".claude.json"))
            .expect("read")
            .contains('{'));
        let s2 = inside(&stage_dir, &boxed).expect("inside");
        assert_eq!(s2.copied, 0);
    }
}
