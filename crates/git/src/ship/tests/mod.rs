//! The shipped form against local seeding: the box steps run for real on the host, in a
//! directory standing for the box, with git's global configuration isolated.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::*;
use crate::{delete_branch, seed, unpin, SeedOpts};

mod delta;
mod forms;
mod full;

/// A home and global git configuration of the test process's own (with git-lfs's filter,
/// as a box image installs it system-wide), set once for the host's git and the box's.
pub(super) fn isolated() -> &'static Path {
    static HOME: OnceLock<PathBuf> = OnceLock::new();
    HOME.get_or_init(|| {
        let home = tempfile::tempdir().expect("home").keep();
        let config = home.join("gitconfig");
        fs_err::write(
            &config,
            "[filter \"lfs\"]\n\tclean = git-lfs clean -- %f\n\tsmudge = git-lfs smudge -- %f\n\tprocess = git-lfs filter-process\n\trequired = true\n",
        )
        .expect("config");
        std::env::set_var("HOME", &home);
        std::env::set_var("GIT_CONFIG_GLOBAL", &config);
        std::env::set_var("GIT_CONFIG_NOSYSTEM", "1");
        home
    })
}

/// `git ARGS` in `dir` (identity given); its stdout, untrimmed.
pub(super) fn run(dir: &Path, args: &[&str]) -> String {
    isolated();
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=u", "-c", "user.email=u@x"])
        .args(args)
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "{args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub(super) fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    fs_err::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    fs_err::write(p, text).expect("write");
}

/// A repository of `commits` commits with every kind of carried work: staged, unstaged on
/// top of staged, a deletion, a new staged file, an executable, symbolic links, untracked
/// files (one below a new directory), ignored secrets and ignored other files, and a
/// sub-repository `sub` (excluded).
pub(super) fn fixture(root: &Path, commits: usize) -> crate::HostRepo {
    run(root, &["init", "-q", "-b", "main"]);
    run(root, &["config", "user.name", "Host User"]);
    run(root, &["config", "user.email", "host@example.org"]);
    run(
        root,
        &["remote", "add", "origin", "https://example.invalid/p.git"],
    );
    write(root, ".gitignore", "*.log\nignored/\n.env\n");
    write(root, "a.txt", "a\n");
    write(root, "dir/b.txt", "b\n");
    write(root, "del.txt", "doomed\n");
    write(root, "exec.sh", "#!/bin/sh\n");
    let mut perm = fs_err::metadata(root.join("exec.sh"))
        .expect("meta")
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    fs_err::set_permissions(root.join("exec.sh"), perm).expect("chmod");
    std::os::unix::fs::symlink("a.txt", root.join("link")).expect("symlink");
    run(root, &["add", "-A"]);
    run(root, &["commit", "-q", "-m", "c0"]);
    for i in 1..commits {
        write(root, "history.txt", &format!("{i}\n"));
        run(root, &["add", "history.txt"]);
        run(root, &["commit", "-q", "-m", &format!("c{i}")]);
    }
    carry(root, "1");
    write(root, "u.txt", "untracked\n");
    write(root, "newdir/u2.txt", "untracked below\n");
    std::os::unix::fs::symlink("dir", root.join("ulink")).expect("symlink");
    write(root, ".env", "SECRET=1\n");
    write(root, "dir/.env", "SECRET=2\n");
    write(root, "x.log", "not shipped\n");
    write(root, "ignored/y", "not shipped\n");
    let sub = root.join("sub");
    fs_err::create_dir_all(&sub).expect("sub");
    run(&sub, &["init", "-q", "-b", "main"]);
    write(&sub, "s.txt", "sub\n");
    write(&sub, ".env", "SUB=1\n");
    crate::detect(root).expect("detect").expect("a repository")
}

/// Uncommitted work tagged `tag`: staged, unstaged on top, a deletion, a new staged file.
pub(super) fn carry(root: &Path, tag: &str) {
    write(root, "a.txt", &format!("a staged {tag}\n"));
    run(root, &["add", "a.txt"]);
    write(root, "a.txt", &format!("a staged {tag}, then unstaged\n"));
    fs_err::remove_file(root.join("del.txt")).expect("rm");
    write(root, "new.txt", &format!("new {tag}\n"));
    run(root, &["add", "new.txt"]);
}

pub(super) fn opts(stage: &Path, depth: Depth) -> ShipOpts {
    ShipOpts {
        branch: "agentbox/b".into(),
        seed: SeedOpts {
            with_env: crate::default_env_patterns(),
            exclude: vec!["sub".into()],
            ..Default::default()
        },
        depth,
        stage: stage.to_owned(),
        owner: (0, 0),
    }
}

/// Carry out `steps` as a provider would, in directories of the host standing for the box.
pub(super) fn exec(steps: &[BoxStep]) -> Vec<Skipped<String>> {
    isolated();
    run_steps(steps, |step| -> Result<(), String> {
        match step {
            BoxStep::Extract { tar, into } => {
                let mut archive = tar::Archive::new(fs_err::File::open(tar).expect("tar"));
                archive.set_preserve_permissions(true);
                archive.unpack(into).map_err(|e| e.to_string())
            }
            BoxStep::Run { argv } | BoxStep::Try { argv, .. } => {
                let out = Command::new(&argv[0])
                    .args(&argv[1..])
                    .output()
                    .expect("spawn");
                if out.status.success() {
                    Ok(())
                } else {
                    Err(String::from_utf8_lossy(&out.stderr).into_owned())
                }
            }
            BoxStep::Remove { path } => fs_err::remove_file(path).map_err(|e| e.to_string()),
        }
    })
    .expect("the steps")
}

/// Every file below `root` but `.git` and `skip`ped first-level names: its kind, content or
/// target, and executable bit.
pub(super) fn tree(root: &Path, skip: &[&str]) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, skip: &[&str], out: &mut BTreeMap<String, String>) {
        for e in fs_err::read_dir(dir).expect("read_dir") {
            let e = e.expect("entry");
            let path = e.path();
            let rel = path
                .strip_prefix(root)
                .expect("below")
                .to_string_lossy()
                .into_owned();
            if dir == root && (rel == ".git" || skip.contains(&rel.as_str())) {
                continue;
            }
            let meta = fs_err::symlink_metadata(&path).expect("meta");
            if meta.file_type().is_symlink() {
                let target = fs_err::read_link(&path).expect("link");
                out.insert(rel, format!("-> {}", target.display()));
            } else if meta.is_dir() {
                walk(root, &path, skip, out);
            } else {
                let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions());
                let text = fs_err::read_to_string(&path).expect("read");
                out.insert(rel, format!("{:o} {text}", mode & 0o111));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, skip, &mut out);
    out
}

/// What git says about the box repository at `dir`: branch, HEAD, index, status, untracked
/// files, identity and remotes.
pub(super) fn facts(dir: &Path) -> Vec<String> {
    let config = run(
        dir,
        &[
            "config",
            "--local",
            "--get-regexp",
            r"^(user|remote|branch|push|agentbox)\.",
        ],
    );
    vec![
        run(dir, &["symbolic-ref", "HEAD"]),
        run(dir, &["rev-parse", "HEAD"]),
        run(dir, &["ls-files", "-s"]),
        run(
            dir,
            &["status", "--porcelain=v1", "-z", "--untracked-files=all"],
        ),
        run(dir, &["ls-files", "-z", "--others", "--exclude-standard"]),
        run(dir, &["diff", "--cached", "HEAD"]),
        config,
    ]
}

/// `seed` of `repo` for box `b` into `dst`, its host refs removed afterwards (so a shipment
/// can make the same ones).
pub(super) fn seed_locally(repo: &crate::HostRepo, dst: &Path, opts: &ShipOpts) -> crate::Seeded {
    let seeded = seed(repo, "b", &opts.branch, dst, &repo.objects, &opts.seed).expect("seed");
    unpin(&repo.root, "b").expect("unpin");
    delete_branch(&repo.root, &opts.branch).expect("branch");
    seeded
}

/// The host repository's refs.
pub(super) fn host_refs(root: &Path) -> String {
    run(root, &["for-each-ref", "--format=%(refname) %(objectname)"])
}
