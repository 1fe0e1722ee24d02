//! A box made from a checkpoint: the checkpoint's tree with the project's repositories moved
//! to the host's present.
//!
//! The box's environment starts as the checkpoint's node (no copy). Its repositories must
//! then be what a fresh box's would be — a new branch `agentbox/<box>` at the host's
//! current commit, tracked files as at that commit, the host's uncommitted work carried
//! over — while what the checkpoint's git does not track stays as the checkpoint had it:
//! what it ignores (installed dependencies, build outputs: the warm state) and its
//! untracked files (a file the setup generated that nobody added to `.gitignore`), as `git
//! checkout -f` + `git reset --hard` would leave them. The checkpoint's tracked files and
//! commits are not the new box's. Where a carried-over path (created, changed or deleted on
//! the host) meets a path the checkpoint keeps, the checkpoint's version is kept and the
//! path reported, unless both hold the same file (nothing of the host's is lost then). A
//! path the host's commit tracks is the commit's, as `git checkout -f` makes it.
//!
//! The checkpoint's files are box-controlled, so the host never works on them. It seeds the
//! fresh workspace, exactly as for a new box, into a directory it makes in the new box's
//! own (empty) layer: `/.agentbox-reseed-<id>` with `workspace/` and [`Plan`] in
//! `plan.json`. The merge then runs inside the box, as a box process ([`inside`], the
//! hidden [`COMMAND`] of the agentbox binary): it reads what the checkpoint's git does not
//! track, removes the rest, and moves the fresh files in (renames within the box's layer), printing
//! the conflicts as one JSON line the host reads as data.

use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The hidden command of the agentbox binary that runs [`inside`]:
/// `agentbox __reseed STAGE` (STAGE as the box sees it).
pub const COMMAND: &str = "__reseed";

/// The prefix of the line [`inside`] prints its conflicts on.
pub const CONFLICTS_LINE: &str = "agentbox-reseed-conflicts: ";

/// What the in-box merge needs besides the trees: each repository of the fresh workspace and
/// the paths its carry-over brought (relative to that repository).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Plan {
    pub repos: Vec<PlanRepo>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PlanRepo {
    /// The first-level sub-directory (`None`: `/workspace` itself).
    pub sub: Option<String>,
    pub carried: Vec<String>,
}

/// The in-box merge of a checkpoint's `/workspace` with the fresh one at `stage` (see the
/// module documentation); the conflicts, relative to `/workspace`. Run inside the box.
pub fn inside(stage: &Path) -> Result<Vec<String>, String> {
    inside_at(stage, Path::new(crate::records::record::WORKSPACE))
}

fn io(what: &str, p: &Path, e: std::io::Error) -> String {
    format!("{what} {}: {e}", p.display())
}

/// [`inside`] with the workspace at `ws` (tests use a scratch directory).
pub fn inside_at(stage: &Path, ws: &Path) -> Result<Vec<String>, String> {
    let plan_path = stage.join("plan.json");
    let plan: Plan = serde_json::from_slice(
        &std::fs::read(&plan_path).map_err(|e| io("reading", &plan_path, e))?,
    )
    .map_err(|e| format!("{}: {e}", plan_path.display()))?;
    let fresh = stage.join("workspace");
    let subs: BTreeSet<PathBuf> = plan
        .repos
        .iter()
        .filter_map(|r| r.sub.as_ref().map(PathBuf::from))
        .collect();
    let mut carried = BTreeSet::new();
    for r in &plan.repos {
        let base = r.sub.as_ref().map(PathBuf::from).unwrap_or_default();
        carried.extend(r.carried.iter().map(|c| base.join(c)));
    }
    if !plan.repos.is_empty() && ws.is_dir() {
        // What the checkpoint's own git does not track, per repository, ignored or not:
        // the warm state and the setup's generated files, kept.
        let mut kept = BTreeSet::new();
        for r in &plan.repos {
            let base = r.sub.as_ref().map(PathBuf::from).unwrap_or_default();
            let dir = ws.join(&base);
            if !dir.join(".git").is_dir() {
                continue;
            }
            let out = std::process::Command::new("git")
                .args(["-C"])
                .arg(&dir)
                // `--others` without exclusions: every untracked path, ignored or not;
                // `--directory` lists a wholly untracked directory (`node_modules/`) as one
                // entry without walking it.
                .args(["ls-files", "-z", "--others", "--directory"])
                .output();
            // A base without git, or a repository git cannot read, keeps nothing of this
            // repository: the box gets the fresh one whole.
            let Ok(out) = out.map_err(|e| eprintln!("{}", io("running git in", &dir, e))) else {
                continue;
            };
            if !out.status.success() {
                continue;
            }
            for p in out.stdout.split(|b| *b == 0).filter(|p| !p.is_empty()) {
                // Bytes, not text: a name that is not UTF-8 must still match on disk.
                let p = p.strip_suffix(b"/").unwrap_or(p);
                kept.insert(base.join(std::ffi::OsStr::from_bytes(p)));
            }
        }
        // A root that is no repository (sub-repositories side by side): no git tracks its
        // other files, so the checkpoint's stay, as in a project without git; the host's
        // copy of the same paths replaces them in the merge.
        if plan.repos.iter().all(|r| r.sub.is_some()) {
            let entries = std::fs::read_dir(ws).map_err(|e| io("reading", ws, e))?;
            for e in entries {
                let e = e.map_err(|e| io("reading", ws, e))?;
                let r = PathBuf::from(e.file_name());
                if !subs.contains(&r) {
                    kept.insert(r);
                }
            }
        }
        prune(ws, Path::new(""), &kept, &subs)?;
    }
    std::fs::create_dir_all(ws).map_err(|e| io("making", ws, e))?;
    // A path the host's work deleted that the checkpoint keeps: the fresh workspace lacks
    // it, so the merge below never meets it; the box's stays, reported.
    let mut conflicts: Vec<PathBuf> = carried
        .iter()
        .filter(|c| {
            std::fs::symlink_metadata(fresh.join(c)).is_err()
                && std::fs::symlink_metadata(ws.join(c)).is_ok()
        })
        .cloned()
        .collect();
    merge(&fresh, ws, Path::new(""), &carried, &mut conflicts)?;
    std::fs::remove_dir_all(stage).map_err(|e| io("removing", stage, e))?;
    conflicts.sort();
    conflicts.dedup();
    Ok(conflicts
        .into_iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect())
}

/// Whether `a` and `b` hold the same file: both regular files with the same bytes and
/// executable bits, or both symbolic links to the same target. A directory is never the
/// same as anything here (its carried paths are met one by one).
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let (Ok(ma), Ok(mb)) = (std::fs::symlink_metadata(a), std::fs::symlink_metadata(b)) else {
        return false;
    };
    if ma.file_type().is_symlink() && mb.file_type().is_symlink() {
        return matches!(
            (std::fs::read_link(a), std::fs::read_link(b)),
            (Ok(x), Ok(y)) if x == y
        );
    }
    if !(ma.is_file() && mb.is_file())
        || ma.len() != mb.len()
        || ma.permissions().mode() & 0o111 != mb.permissions().mode() & 0o111
    {
        return false;
    }
    matches!(
        (std::fs::read(a), std::fs::read(b)),
        (Ok(x), Ok(y)) if x == y
    )
}

/// Remove from `root/rel` every entry that is not kept, below a kept one, a sub-repository
/// or on the way to one of those.
fn prune(
    root: &Path,
    rel: &Path,
    kept: &BTreeSet<PathBuf>,
    subs: &BTreeSet<PathBuf>,
) -> Result<(), String> {
    let dir = root.join(rel);
    let entries = std::fs::read_dir(&dir).map_err(|e| io("reading", &dir, e))?;
    for e in entries {
        let e = e.map_err(|e| io("reading", &dir, e))?;
        let r = rel.join(e.file_name());
        if kept.contains(&r) {
            continue;
        }
        let path = e.path();
        let is_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
        let leads_somewhere =
            subs.contains(&r) || kept.iter().chain(subs.iter()).any(|k| k.starts_with(&r));
        if is_dir && leads_somewhere {
            prune(root, &r, kept, subs)?;
        } else {
            remove(&path)?;
        }
    }
    Ok(())
}

fn remove(p: &Path) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(p).map_err(|e| io("reading", p, e))?;
    if meta.is_dir() {
        std::fs::remove_dir_all(p)
    } else {
        std::fs::remove_file(p)
    }
    .map_err(|e| io("removing", p, e))
}

/// Move `fresh/rel`'s entries into `ws/rel`: what `ws` lacks is renamed in whole; where
/// both have a directory, recurse; where `ws` has something else, the fresh entry wins
/// unless the carry-over brought a path at or below it (then the box's stays: a conflict,
/// unless both are the same file).
fn merge(
    fresh: &Path,
    ws: &Path,
    rel: &Path,
    carried: &BTreeSet<PathBuf>,
    conflicts: &mut Vec<PathBuf>,
) -> Result<(), String> {
    let dir = fresh.join(rel);
    let entries = std::fs::read_dir(&dir).map_err(|e| io("reading", &dir, e))?;
    for e in entries {
        let e = e.map_err(|e| io("reading", &dir, e))?;
        let r = rel.join(e.file_name());
        let src = e.path();
        let dst = ws.join(&r);
        let fresh_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
        match std::fs::symlink_metadata(&dst) {
            Err(_) => move_into(&src, &dst)?,
            Ok(m) if m.is_dir() && fresh_dir => merge(fresh, ws, &r, carried, conflicts)?,
            Ok(_) => {
                if carried.iter().any(|c| c.starts_with(&r)) {
                    if !same_file(&src, &dst) {
                        conflicts.push(r);
                    }
                } else {
                    remove(&dst)?;
                    move_into(&src, &dst)?;
                }
            }
        }
    }
    Ok(())
}

/// Rename `src` to `dst`; a copy where the filesystem cannot rename it (a directory of a
/// lower layer).
fn move_into(src: &Path, dst: &Path) -> Result<(), String> {
    match std::fs::rename(src, dst) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::XDEV.raw_os_error()) => {
            agentbox_store::fsops::copy::copy_dir(
                src,
                dst,
                &agentbox_store::fsops::copy::CopyOpts::default(),
            )
            .map_err(|e| format!("copying {} to {}: {e}", src.display(), dst.display()))?;
            Ok(())
        }
        Err(e) => Err(io("moving into place", dst, e)),
    }
}

/// The host's half, before the box exists as a record: environment `name` forked from the
/// checkpoint's node, and the fresh workspace of `source` seeded (with `opts`) into a stage
/// in the new environment's own layer. Returns the environment, the repositories seeded
/// and the stage as the box sees it. On failure nothing of it is left.
pub fn stage(
    home: &agentbox_core::home::Home,
    store: &agentbox_store::Store,
    checkpoint: &crate::checkpoints::checkpoint::Manifest,
    name: &agentbox_core::name::BoxName,
    source: Option<&Path>,
    opts: &agentbox_git::SeedOpts,
    progress: &dyn crate::progress::Progress,
) -> crate::Result<(
    agentbox_store::EnvState,
    Vec<crate::lifecycle::seeding::SeededRepo>,
    String,
)> {
    use crate::BoxError;
    let full_ref =
        crate::checkpoints::checkpoint::ref_name(checkpoint.project.as_deref(), &checkpoint.name);
    let state = store.fork_node(&full_ref, name, None)?;
    let made = (|| {
        // The layer is the new environment's own, empty and made by the host: nothing in
        // it is box-controlled yet.
        let upper = store.box_layers(name)?.upper;
        let rel = format!(".agentbox-reseed-{}", agentbox_core::id::new_id());
        let stage = upper.join(&rel);
        fs_err::create_dir(&stage)?;
        let mut seeded = Vec::new();
        if let Some(src) = source {
            progress.busy("seeding the fresh workspace", &mut || {
                seeded = crate::lifecycle::seeding::seed_workspace(
                    home,
                    src,
                    name,
                    &stage.join("workspace"),
                    opts,
                    true,
                )
                .map_err(BoxError::Seed)?;
                Ok(())
            })?;
        } else {
            fs_err::create_dir(stage.join("workspace"))?;
        }
        let repos = seeded
            .iter()
            .map(|r| {
                let carried = if opts.no_carry {
                    Vec::new()
                } else {
                    agentbox_git::carried_paths(&r.record.repo, name).map_err(BoxError::Seed)?
                };
                Ok(PlanRepo {
                    sub: r.record.sub.clone(),
                    carried,
                })
            })
            .collect::<crate::Result<Vec<_>>>()?;
        agentbox_core::atomic::write_json(&stage.join("plan.json"), &Plan { repos })?;
        Ok::<_, BoxError>((seeded, format!("/{rel}")))
    })();
    match made {
        Ok((seeded, stage)) => Ok((state, seeded, stage)),
        Err(e) => {
            let _ = store.remove_env(name);
            Err(e)
        }
    }
}

impl crate::facade::Boxes {
    /// The in-box half: run the merge in box `name` (started for it), then make the result
    /// the box's first own node. Returns the conflicts.
    pub(crate) fn finish_reseed(
        &self,
        name: &str,
        stage: &str,
        checkpoint: &str,
    ) -> crate::Result<Vec<String>> {
        use crate::BoxError;
        let mut argv = crate::records::record::box_binary_argv();
        argv.extend([COMMAND.to_owned(), stage.to_owned()]);
        let ran = self.provider_of(name)?.collect(name, argv, "/", false)?;
        let line = ran
            .output
            .lines()
            .find_map(|l| l.strip_prefix(CONFLICTS_LINE));
        let conflicts: Vec<String> = match (ran.status, line) {
            (0, Some(json)) => serde_json::from_str(json).map_err(|e| BoxError::Reseed {
                name: name.to_owned(),
                why: format!("unreadable answer from the box: {e}"),
            })?,
            _ => {
                return Err(BoxError::Reseed {
                    name: name.to_owned(),
                    why: ran.output.lines().take(5).collect::<Vec<_>>().join("; "),
                })
            }
        };
        self.commit(
            name,
            agentbox_store::CommitOpts {
                message: format!("box created from checkpoint {checkpoint}"),
                ..agentbox_store::CommitOpts::default()
            },
        )?;
        Ok(conflicts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(p: &Path, s: &str) {
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, s).expect("write");
    }

    fn git(dir: &Path, args: &[&str]) {
        let ok = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .status()
            .expect("git")
            .success();
        assert!(ok, "git {args:?}");
    }

    /// A checkpoint's workspace (a repository with ignored `node_modules/` and a tracked
    /// change of its own) merged with a fresh one: ignored files stay, tracked files are the
    /// fresh ones, the checkpoint's own tracked changes go, and a carried-over path the
    /// checkpoint also holds keeps the checkpoint's version and is reported.
    #[test]
    fn ignored_files_stay_tracked_files_are_fresh_collisions_are_the_boxs() {
        let t = tempfile::tempdir().expect("tmp");
        let ws = t.path().join("ws");
        write(&ws.join(".gitignore"), "node_modules/\nbuild.out\n");
        write(&ws.join("src.txt"), "checkpoint's edit\n");
        write(&ws.join("old-only.txt"), "tracked in the checkpoint only\n");
        write(&ws.join("node_modules/dep/index.js"), "warm\n");
        write(&ws.join("build.out"), "checkpoint build\n");
        git(&ws, &["init", "-q"]);
        git(&ws, &["add", "-A"]);
        let stage = t.path().join("stage");
        let fresh = stage.join("workspace");
        write(&fresh.join(".gitignore"), "node_modules/\nbuild.out\n");
        write(&fresh.join("src.txt"), "host's commit\n");
        write(&fresh.join("build.out"), "carried from the host\n");
        write(&fresh.join(".git/HEAD"), "ref: refs/heads/agentbox/new\n");
        let plan = Plan {
            repos: vec![PlanRepo {
                sub: None,
                carried: vec!["build.out".into()],
            }],
        };
        write(
            &stage.join("plan.json"),
            &serde_json::to_string(&plan).expect("json"),
        );
        let conflicts = inside_at(&stage, &ws).expect("merge");
        let read = |p: &str| std::fs::read_to_string(ws.join(p)).ok();
        assert_eq!(read("src.txt").as_deref(), Some("host's commit\n"));
        assert_eq!(read("node_modules/dep/index.js").as_deref(), Some("warm\n"));
        assert_eq!(read("build.out").as_deref(), Some("checkpoint build\n"));
        assert_eq!(conflicts, vec!["build.out".to_owned()]);
        assert_eq!(read("old-only.txt"), None);
        assert_eq!(
            read(".git/HEAD").as_deref(),
            Some("ref: refs/heads/agentbox/new\n")
        );
        assert!(!stage.exists(), "the stage is gone");
    }

    /// The checkpoint's untracked files that its git does not ignore stay, as `git reset
    /// --hard` leaves them: one the host lacks is kept; one the host's work also has is
    /// the box's and reported, unless both are the same file; one the host's work deleted
    /// is the box's and reported; one the host's commit tracks is the commit's. The host's
    /// own untracked file comes in.
    #[test]
    fn untracked_files_stay_box_wins_on_collisions() {
        use std::os::unix::ffi::OsStrExt;
        let t = tempfile::tempdir().expect("tmp");
        let ws = t.path().join("ws");
        write(&ws.join("src.txt"), "v1\n");
        git(&ws, &["init", "-q"]);
        git(&ws, &["add", "-A"]);
        write(&ws.join("generated.txt"), "made by the setup\n");
        write(&ws.join("gen/deep/out.txt"), "a generated directory\n");
        write(&ws.join("setup.env"), "checkpoint's env\n");
        write(&ws.join("same.cfg"), "identical\n");
        write(&ws.join("dropped.txt"), "checkpoint's untracked copy\n");
        write(&ws.join("committed.txt"), "checkpoint's untracked copy\n");
        let odd = std::ffi::OsStr::from_bytes(b"caf\xe9.txt");
        std::fs::write(ws.join(odd), "not UTF-8\n").expect("write");
        let stage = t.path().join("stage");
        let fresh = stage.join("workspace");
        write(&fresh.join("src.txt"), "v2\n");
        write(&fresh.join("committed.txt"), "in the host's commit\n");
        write(&fresh.join("setup.env"), "host's env\n");
        write(&fresh.join("same.cfg"), "identical\n");
        write(&fresh.join("new.txt"), "host's untracked\n");
        write(&fresh.join(".git/HEAD"), "ref: refs/heads/agentbox/new\n");
        let plan = Plan {
            repos: vec![PlanRepo {
                sub: None,
                carried: ["dropped.txt", "new.txt", "same.cfg", "setup.env"]
                    .map(String::from)
                    .to_vec(),
            }],
        };
        write(
            &stage.join("plan.json"),
            &serde_json::to_string(&plan).expect("json"),
        );
        let conflicts = inside_at(&stage, &ws).expect("merge");
        let read = |p: &str| std::fs::read_to_string(ws.join(p)).ok();
        assert_eq!(
            read("generated.txt").as_deref(),
            Some("made by the setup\n")
        );
        assert_eq!(
            read("gen/deep/out.txt").as_deref(),
            Some("a generated directory\n")
        );
        assert_eq!(read("setup.env").as_deref(), Some("checkpoint's env\n"));
        assert_eq!(read("same.cfg").as_deref(), Some("identical\n"));
        assert_eq!(
            read("dropped.txt").as_deref(),
            Some("checkpoint's untracked copy\n")
        );
        assert_eq!(
            read("committed.txt").as_deref(),
            Some("in the host's commit\n")
        );
        assert_eq!(read("new.txt").as_deref(), Some("host's untracked\n"));
        assert_eq!(read("src.txt").as_deref(), Some("v2\n"));
        assert!(ws.join(odd).is_file(), "a name that is not UTF-8 stays");
        assert_eq!(
            conflicts,
            vec!["dropped.txt".to_owned(), "setup.env".to_owned()]
        );
    }

    /// A root that is no repository, with a sub-repository: the checkpoint's other root
    /// files stay, the host's copy of the same path replaces the checkpoint's, and the
    /// sub-repository keeps its untracked files only.
    #[test]
    fn a_plain_root_keeps_the_checkpoints_files_the_hosts_copy_wins() {
        let t = tempfile::tempdir().expect("tmp");
        let ws = t.path().join("ws");
        write(&ws.join("notes.txt"), "checkpoint's notes\n");
        write(&ws.join("shared.txt"), "checkpoint's copy\n");
        write(&ws.join("api/lib.rs"), "checkpoint's edit\n");
        git(&ws.join("api"), &["init", "-q"]);
        git(&ws.join("api"), &["add", "-A"]);
        write(&ws.join("api/out.log"), "untracked\n");
        let stage = t.path().join("stage");
        let fresh = stage.join("workspace");
        write(&fresh.join("shared.txt"), "host's copy\n");
        write(&fresh.join("api/lib.rs"), "host's commit\n");
        write(
            &fresh.join("api/.git/HEAD"),
            "ref: refs/heads/agentbox/new--api\n",
        );
        let plan = Plan {
            repos: vec![PlanRepo {
                sub: Some("api".into()),
                carried: Vec::new(),
            }],
        };
        write(
            &stage.join("plan.json"),
            &serde_json::to_string(&plan).expect("json"),
        );
        let conflicts = inside_at(&stage, &ws).expect("merge");
        let read = |p: &str| std::fs::read_to_string(ws.join(p)).ok();
        assert_eq!(read("notes.txt").as_deref(), Some("checkpoint's notes\n"));
        assert_eq!(read("shared.txt").as_deref(), Some("host's copy\n"));
        assert_eq!(read("api/lib.rs").as_deref(), Some("host's commit\n"));
        assert_eq!(read("api/out.log").as_deref(), Some("untracked\n"));
        assert_eq!(
            read("api/.git/HEAD").as_deref(),
            Some("ref: refs/heads/agentbox/new--api\n")
        );
        assert!(conflicts.is_empty(), "{conflicts:?}");
    }
}
