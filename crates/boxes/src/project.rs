//! Which project a directory belongs to.
//!
//! A project is the directory a box is made from: a repository's top directory, or a
//! monorepo's root whose first-level sub-directories are repositories. From a directory
//! inside it, the project's root is:
//! 1. the nearest ancestor (or the directory itself) holding [`PROJECT_FILE`];
//! 2. else the nearest ancestor holding `.git` (a directory, or a file for linked worktrees
//!    and submodules) — or its parent, when that parent holds `.git` too (a sub-repository
//!    of a monorepo whose root is itself a repository).
//!
//! A plain directory that only *contains* repositories is not a project by itself (a
//! `~/src` full of clones must never be taken for one); mark a monorepo whose root is not a
//! repository with [`PROJECT_FILE`], or name it with `create -C DIR`.
//!
//! Detection only looks at the file system (no `git` process): it runs on every command
//! that may omit its box.

use std::path::{Path, PathBuf};

/// The workspace file of a project (its `defaults:` block is the workspace config layer).
pub const PROJECT_FILE: &str = "agentbox.yaml";

/// The root of the project `dir` is in (canonical), if it is in one.
pub fn find_root(dir: &Path) -> Option<PathBuf> {
    let dir = std::fs::canonicalize(dir).ok()?;
    let uid = rustix::process::geteuid().as_raw();
    if let Some(d) = dir
        .ancestors()
        .find(|d| d.join(PROJECT_FILE).is_file() && planted_by_us(d, PROJECT_FILE, uid))
    {
        return Some(d.to_path_buf());
    }
    let git = |d: &Path| d.join(".git").exists() && planted_by_us(d, ".git", uid);
    let top = dir.ancestors().find(|d| git(d))?;
    match top.parent() {
        Some(p) if git(p) => Some(p.to_path_buf()),
        _ => Some(top.to_path_buf()),
    }
}

/// Whether the marker `name` in directory `dir` may make `dir` a project root: always, unless
/// `dir` is writable by others (a shared `/tmp`) and the marker belongs to someone else than
/// the caller or root. Otherwise another local user could plant `/tmp/agentbox.yaml` (or
/// `/tmp/.git`) and turn every project below it into a box of the whole shared directory —
/// their files, and the caller's private ones there, in the box — with their file's
/// settings, as git's `safe.directory` check guards against for repositories.
fn planted_by_us(dir: &Path, name: &str, uid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let shared = std::fs::metadata(dir).is_ok_and(|m| m.mode() & 0o022 != 0);
    if !shared {
        return true;
    }
    std::fs::symlink_metadata(dir.join(name)).is_ok_and(|m| m.uid() == uid || m.uid() == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_are_found_from_inside() {
        let t = tempfile::tempdir().expect("test setup");
        let root = std::fs::canonicalize(t.path()).expect("test setup");
        let repo = root.join("repo");
        std::fs::create_dir_all(repo.join(".git")).expect("test setup");
        std::fs::create_dir_all(repo.join("src/deep")).expect("test setup");
        assert_eq!(find_root(&repo.join("src/deep")), Some(repo.clone()));
        // A sub-repository of a monorepo that is a repository itself.
        let sub = repo.join("web");
        std::fs::create_dir_all(sub.join("src")).expect("test setup");
        std::fs::write(sub.join(".git"), "gitdir: elsewhere\n").expect("test setup");
        assert_eq!(find_root(&sub.join("src")), Some(repo.clone()));
        // A monorepo root that is not a repository, marked by its agentbox.yaml.
        let mono = root.join("mono");
        std::fs::create_dir_all(mono.join("api/.git")).expect("test setup");
        std::fs::write(mono.join(PROJECT_FILE), "defaults: {}\n").expect("test setup");
        assert_eq!(find_root(&mono.join("api")), Some(mono.clone()));
        // A directory that only holds repositories is not a project by itself.
        let t2 = tempfile::tempdir().expect("test setup");
        let clones = std::fs::canonicalize(t2.path()).expect("test setup");
        std::fs::create_dir_all(clones.join("one/.git")).expect("test setup");
        assert_eq!(find_root(&clones), None);
        let plain = root.join("plain");
        std::fs::create_dir_all(&plain).expect("test setup");
        // tempdirs may themselves sit inside a repository; only assert what holds anywhere.
        assert_ne!(find_root(&plain), Some(plain));
    }

    #[test]
    fn a_marker_another_user_planted_in_a_shared_directory_is_not_a_project() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().expect("test setup");
        let shared = std::fs::canonicalize(t.path()).expect("test setup");
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777))
            .expect("test setup");
        let repo = shared.join("proj");
        std::fs::create_dir_all(repo.join(".git")).expect("test setup");
        std::fs::write(shared.join(PROJECT_FILE), "defaults: {}\n").expect("test setup");
        let uid = rustix::process::geteuid().as_raw();
        // Our own marker in a shared directory still counts.
        assert!(planted_by_us(&shared, PROJECT_FILE, uid));
        assert_eq!(find_root(&repo), Some(shared.clone()));
        // Someone else's does not (as root, the file is given to nobody; as a user, the
        // check is made as if by another uid).
        if uid == 0 {
            std::os::unix::fs::lchown(shared.join(PROJECT_FILE), Some(65534), Some(65534))
                .expect("chown");
            assert_eq!(find_root(&repo), Some(repo.clone()));
        } else {
            assert!(!planted_by_us(&shared, PROJECT_FILE, uid + 1));
        }
        // A private directory's markers are the owner's whoever made them.
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755))
            .expect("test setup");
        assert!(planted_by_us(&shared, PROJECT_FILE, uid + 1));
    }
}
