//! The shipped form against local seeding: the box steps run for real on the host, in a
//! directory standing for the box, with git's global configuration isolated.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::*;
use crate::{delete_branch, seed, unpin, SeedOpts};

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
fn run(dir: &Path, args: &[&str]) -> String {
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

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    fs_err::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    fs_err::write(p, text).expect("write");
}

/// A repository of `commits` commits with every kind of carried work: staged, unstaged on
/// top of staged, a deletion, a new staged file, an executable, symbolic links, untracked
/// files (one below a new directory), ignored secrets and ignored other files, and a
/// sub-repository `sub` (excluded).
fn fixture(root: &Path, commits: usize) -> crate::HostRepo {
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
fn carry(root: &Path, tag: &str) {
    write(root, "a.txt", &format!("a staged {tag}\n"));
    run(root, &["add", "a.txt"]);
    write(root, "a.txt", &format!("a staged {tag}, then unstaged\n"));
    fs_err::remove_file(root.join("del.txt")).expect("rm");
    write(root, "new.txt", &format!("new {tag}\n"));
    run(root, &["add", "new.txt"]);
}

fn opts(stage: &Path, depth: Depth) -> ShipOpts {
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
fn tree(root: &Path, skip: &[&str]) -> BTreeMap<String, String> {
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
fn facts(dir: &Path) -> Vec<String> {
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
fn seed_locally(repo: &crate::HostRepo, dst: &Path, opts: &ShipOpts) -> crate::Seeded {
    let seeded = seed(repo, "b", &opts.branch, dst, &repo.objects, &opts.seed).expect("seed");
    unpin(&repo.root, "b").expect("unpin");
    delete_branch(&repo.root, &opts.branch).expect("branch");
    seeded
}

/// The host repository's refs.
fn host_refs(root: &Path) -> String {
    run(root, &["for-each-ref", "--format=%(refname) %(objectname)"])
}

#[test]
fn a_shipped_box_is_what_local_seeding_makes() {
    let d = tempfile::tempdir().expect("tempdir");
    let host = d.path().join("host");
    fs_err::create_dir(&host).expect("mkdir");
    let repo = fixture(&host, 8);
    let stage = d.path().join("stage");
    let o = opts(&stage, Depth::Fixed(3));
    let local = d.path().join("local");
    let seeded = seed_locally(&repo, &local, &o);
    let host_status = run(&host, &["status", "--porcelain=v1", "-z"]);

    let shipped = ship(&repo, "b", &o).expect("ship");
    assert_eq!(shipped.seeded, seeded);
    assert!(shipped.stash.is_some());
    assert_eq!(shipped.form, Form::Full { depth: Some(3) });
    // u.txt, newdir/u2.txt, ulink, .env, dir/.env; not sub's.
    assert_eq!(shipped.seeded.untracked, 5);
    let mut staged: Vec<_> = fs_err::read_dir(&stage)
        .expect("stage")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    staged.sort();
    assert_eq!(staged, ["files.tar", "git.tar"]);
    // The host: the box's pins and branch, no temporary ref, its own state untouched.
    let refs = host_refs(&host);
    assert!(!refs.contains("refs/agentbox-ship/"), "{refs}");
    assert!(refs.contains("refs/agentbox/b/base"), "{refs}");
    assert!(refs.contains("refs/agentbox/b/carried"), "{refs}");
    assert!(refs.contains("refs/heads/agentbox/b "), "{refs}");
    assert_eq!(run(&host, &["status", "--porcelain=v1", "-z"]), host_status);

    let boxdir = d.path().join("box");
    fs_err::create_dir(&boxdir).expect("mkdir");
    let ws = boxdir.to_str().expect("utf-8");
    let skipped = exec(&shipped.steps(ws));
    assert!(skipped.is_empty(), "{skipped:?}");
    assert_eq!(tree(&boxdir, &[]), tree(&local, &[]));
    assert_eq!(facts(&boxdir), facts(&local));
    // Shallow as asked, nothing of the host's path or hooks, nothing of the stage's refs.
    assert_eq!(run(&boxdir, &["rev-list", "--count", "HEAD"]).trim(), "3");
    assert!(boxdir.join(".git/shallow").exists());
    assert!(!boxdir.join(".git/hooks").exists());
    let config = fs_err::read_to_string(boxdir.join(".git/config")).expect("config");
    assert!(!config.contains(host.to_str().expect("utf-8")), "{config}");
    assert!(!config.contains("file:"), "{config}");
    assert_eq!(
        run(&boxdir, &["for-each-ref", "--format=%(refname)"]).trim(),
        "refs/heads/agentbox/b"
    );
    let tree_of = |dir: &Path| run(dir, &["write-tree"]);
    assert_eq!(tree_of(&boxdir), tree_of(&local));
}

#[test]
fn a_shipment_without_carry_and_with_full_history() {
    let d = tempfile::tempdir().expect("tempdir");
    let host = d.path().join("host");
    fs_err::create_dir(&host).expect("mkdir");
    let repo = fixture(&host, 5);
    let stage = d.path().join("stage");
    let mut o = opts(&stage, Depth::Full);
    o.seed.from_ref = Some("HEAD~1".into());
    let local = d.path().join("local");
    let seeded = seed_locally(&repo, &local, &o);
    let shipped = ship(&repo, "b", &o).expect("ship");
    assert_eq!(shipped.seeded, seeded);
    assert_eq!(shipped.stash, None);
    assert_eq!(shipped.form, Form::Full { depth: None });
    let boxdir = d.path().join("box");
    fs_err::create_dir(&boxdir).expect("mkdir");
    exec(&shipped.steps(boxdir.to_str().expect("utf-8")));
    assert_eq!(tree(&boxdir, &[]), tree(&local, &[]));
    assert_eq!(facts(&boxdir), facts(&local));
    assert_eq!(run(&boxdir, &["rev-list", "--count", "HEAD"]).trim(), "4");
    assert!(!boxdir.join(".git/shallow").exists());
}

#[test]
fn a_failed_shipment_leaves_nothing() {
    let d = tempfile::tempdir().expect("tempdir");
    let host = d.path().join("host");
    fs_err::create_dir(&host).expect("mkdir");
    let repo = fixture(&host, 4);
    let before = host_refs(&host);
    let stage = d.path().join("stage");

    // A ref that does not exist.
    let mut o = opts(&stage, Depth::Adaptive);
    o.seed.from_ref = Some("no-such-branch".into());
    match ship(&repo, "b", &o) {
        Err(GitError::NoSuchRef { repo: r, start }) => {
            assert_eq!(r, repo.root);
            assert_eq!(start, "no-such-branch");
        }
        other => panic!("{other:?}"),
    }
    assert!(!stage.exists());
    assert_eq!(host_refs(&host), before);

    // An object of the history the host cannot read: the fetch into the stage fails.
    let first = run(&host, &["rev-parse", "HEAD~2:history.txt"])
        .trim()
        .to_owned();
    let loose = repo.objects.join(&first[..2]).join(&first[2..]);
    fs_err::remove_file(&loose).expect("the loose object");
    match ship(&repo, "b", &opts(&stage, Depth::Full)) {
        Err(GitError::Ship {
            repo: r,
            box_name,
            what,
            ..
        }) => {
            assert_eq!(r, repo.root);
            assert_eq!(box_name, "b");
            assert_eq!(what, "fetch into the stage");
        }
        other => panic!("{other:?}"),
    }
    assert!(!stage.exists());
    assert_eq!(host_refs(&host), before);

    // The box's branch exists already: refused at the end, everything made undone.
    run(&host, &["branch", "agentbox/b"]);
    let before = host_refs(&host);
    match ship(&repo, "b", &opts(&stage, Depth::Fixed(1))) {
        Err(GitError::Ship { what, .. }) => assert_eq!(what, "pin the base"),
        other => panic!("{other:?}"),
    }
    assert!(!stage.exists());
    assert_eq!(host_refs(&host), before);
}

#[test]
fn a_checkpoint_s_box_takes_a_delta() {
    let d = tempfile::tempdir().expect("tempdir");
    let host = d.path().join("host");
    fs_err::create_dir(&host).expect("mkdir");
    let repo = fixture(&host, 6);
    // The checkpoint: a shallow box shipped at the host's first state, with a warm,
    // ignored artifact and a commit of its own.
    let first_stage = d.path().join("stage1");
    let mut o = opts(&first_stage, Depth::Fixed(2));
    o.branch = "agentbox/cp".into();
    let first = ship(&repo, "cp", &o).expect("ship");
    let boxdir = d.path().join("box");
    fs_err::create_dir(&boxdir).expect("mkdir");
    let ws = boxdir.to_str().expect("utf-8");
    exec(&first.steps(ws));
    write(&boxdir, "ignored/warm", "artifact\n");
    run(&boxdir, &["commit", "-q", "-am", "the box's own"]);
    let from_tip = first.seeded.base.clone();

    // The host moves on: its work committed, two more commits, new carried work.
    run(&host, &["add", "-A", "a.txt", "new.txt", "del.txt"]);
    run(&host, &["commit", "-q", "-m", "landed"]);
    write(&host, "later.txt", "later\n");
    write(&host, "del.txt", "back\n");
    run(&host, &["add", "later.txt", "del.txt"]);
    run(&host, &["commit", "-q", "-m", "later"]);
    carry(&host, "2");
    write(&host, "u.txt", "untracked, changed\n");

    let stage = d.path().join("stage2");
    let o = opts(&stage, Depth::Adaptive);
    // Unknown to the host, or not an ancestor: no delta, nothing made.
    assert!(ship_delta(&repo, "b", &"1".repeat(40), &o)
        .expect("unknown")
        .is_none());
    let side = run(&boxdir, &["rev-parse", "HEAD"]).trim().to_owned();
    assert!(ship_delta(&repo, "b", &side, &o).expect("box's").is_none());
    run(&host, &["branch", "side", &format!("{from_tip}~1")]);
    run(
        &host,
        &["commit-tree", "-m", "x", &format!("{from_tip}^{{tree}}")],
    );
    let diverged = run(
        &host,
        &["commit-tree", "-p", "side", "-m", "diverged", "side^{tree}"],
    )
    .trim()
    .to_owned();
    assert!(ship_delta(&repo, "b", &diverged, &o)
        .expect("diverged")
        .is_none());
    assert!(!stage.exists());

    let local = d.path().join("local");
    let seeded = seed_locally(&repo, &local, &o);
    let before = host_refs(&host);
    let delta = ship_delta(&repo, "b", &from_tip, &o)
        .expect("delta")
        .expect("from_tip serves");
    assert_eq!(delta.seeded, seeded);
    assert_eq!(
        delta.form,
        Form::Delta {
            from_tip: from_tip.clone(),
            bundle: true
        }
    );
    assert!(!host_refs(&host).contains("refs/agentbox-ship/"));
    assert_ne!(host_refs(&host), before, "pinned");
    let skipped = exec(&delta.steps(ws));
    assert!(skipped.is_empty(), "{skipped:?}");
    assert_eq!(tree(&boxdir, &["ignored"]), tree(&local, &[]));
    assert_eq!(
        fs_err::read_to_string(boxdir.join("ignored/warm")).expect("kept"),
        "artifact\n"
    );
    let (mut got, want) = (facts(&boxdir), facts(&local));
    // The checkpoint's repository still has its own branch's upstream: left out.
    let config = got.pop().expect("config");
    let config: String = config
        .lines()
        .filter(|l| !l.starts_with("branch.agentbox/cp."))
        .map(|l| format!("{l}\n"))
        .collect();
    got.push(config);
    assert_eq!(got, want);
    assert!(!boxdir.join(DELTA_BUNDLE).exists());
}

#[test]
fn a_delta_whose_carried_work_collides_is_reported() {
    let d = tempfile::tempdir().expect("tempdir");
    let host = d.path().join("host");
    fs_err::create_dir(&host).expect("mkdir");
    let repo = fixture(&host, 3);
    let mut o = opts(&d.path().join("stage1"), Depth::Fixed(5));
    o.seed.no_carry = true;
    o.branch = "agentbox/cp".into();
    let first = ship(&repo, "cp", &o).expect("ship");
    let boxdir = d.path().join("box");
    fs_err::create_dir(&boxdir).expect("mkdir");
    let ws = boxdir.to_str().expect("utf-8");
    exec(&first.steps(ws));
    // The box has a file of its own where the host's carried work adds one.
    write(&boxdir, "new.txt", "the box's\n");

    let o = opts(&d.path().join("stage2"), Depth::Adaptive);
    let delta = ship_delta(&repo, "b", &first.seeded.base, &o)
        .expect("delta")
        .expect("from_tip serves");
    assert_eq!(
        delta.form,
        Form::Delta {
            from_tip: first.seeded.base.clone(),
            bundle: true
        }
    );
    let skipped = exec(&delta.steps(ws));
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(skipped[0].what, "the host's uncommitted changes");
    assert!(skipped[0].error.contains("new.txt"), "{}", skipped[0].error);
    assert_eq!(
        fs_err::read_to_string(boxdir.join("new.txt")).expect("kept"),
        "the box's\n"
    );
    assert_eq!(
        run(&boxdir, &["symbolic-ref", "HEAD"]).trim(),
        "refs/heads/agentbox/b"
    );
    assert_eq!(
        run(&boxdir, &["rev-parse", "HEAD"]).trim(),
        first.seeded.base
    );
}

#[test]
fn lfs_objects_of_the_checkout_travel() {
    let d = tempfile::tempdir().expect("tempdir");
    let host = d.path().join("host");
    fs_err::create_dir(&host).expect("mkdir");
    isolated();
    run(&host, &["init", "-q", "-b", "main"]);
    write(
        &host,
        ".gitattributes",
        "*.bin filter=lfs diff=lfs merge=lfs -text\n",
    );
    write(&host, "big.bin", "large content\n");
    write(&host, "gone.bin", "lost content\n");
    run(&host, &["add", "-A"]);
    run(&host, &["commit", "-q", "-m", "lfs"]);
    // One object the host no longer has.
    let pointer = run(&host, &["show", "HEAD:gone.bin"]);
    let oid = pointer
        .lines()
        .find_map(|l| l.strip_prefix("oid sha256:"))
        .expect("a pointer")
        .to_owned();
    let repo = crate::detect(&host).expect("detect").expect("a repository");
    fs_err::remove_file(repo.git_dir().join(lfs::rel_path(&oid))).expect("rm");
    let mut o = opts(&d.path().join("stage"), Depth::Adaptive);
    // Carried work would run git-lfs's clean filter on the working tree, which stores the
    // lost object again.
    o.seed.no_carry = true;
    let shipped = ship(&repo, "b", &o).expect("ship");
    assert_eq!((shipped.lfs_objects, shipped.lfs_missing), (1, 1));
    let mut names = vec![];
    let mut archive = tar::Archive::new(fs_err::File::open(&shipped.git_tar).expect("tar"));
    for e in archive.entries().expect("entries") {
        names.push(
            e.expect("entry")
                .path()
                .expect("path")
                .display()
                .to_string(),
        );
    }
    let big = run(&host, &["show", "HEAD:big.bin"]);
    let big_oid = big
        .lines()
        .find_map(|l| l.strip_prefix("oid sha256:"))
        .expect("a pointer");
    let want = format!(".git/{}", lfs::rel_path(big_oid).display());
    assert!(names.contains(&want), "{names:?}");
    assert!(!names.iter().any(|n| n.contains(&oid)));
    // In the box, git-lfs finds the shipped object where it looks for it, and leaves the
    // lost one a pointer (checked out as pointers first, then populated from the box's own
    // store only: no network).
    let boxdir = d.path().join("box");
    fs_err::create_dir(&boxdir).expect("mkdir");
    std::env::set_var("GIT_LFS_SKIP_SMUDGE", "1");
    exec(&shipped.steps(boxdir.to_str().expect("utf-8")));
    run(&boxdir, &["lfs", "checkout"]);
    assert_eq!(
        fs_err::read_to_string(boxdir.join("big.bin")).expect("big"),
        "large content\n"
    );
    assert_eq!(
        fs_err::read_to_string(boxdir.join("gone.bin")).expect("gone"),
        pointer
    );
}

#[test]
fn a_sha256_repository_ships() {
    let d = tempfile::tempdir().expect("tempdir");
    let host = d.path().join("host");
    fs_err::create_dir(&host).expect("mkdir");
    run(
        &host,
        &["init", "-q", "-b", "main", "--object-format=sha256"],
    );
    write(&host, "a.txt", "a\n");
    run(&host, &["add", "a.txt"]);
    run(&host, &["commit", "-q", "-m", "c0"]);
    write(&host, "a.txt", "changed\n");
    let repo = crate::detect(&host).expect("detect").expect("a repository");
    let shipped = ship(&repo, "b", &opts(&d.path().join("stage"), Depth::Adaptive)).expect("ship");
    assert_eq!(shipped.seeded.base.len(), 64);
    let boxdir = d.path().join("box");
    fs_err::create_dir(&boxdir).expect("mkdir");
    exec(&shipped.steps(boxdir.to_str().expect("utf-8")));
    assert_eq!(
        run(&boxdir, &["rev-parse", "HEAD"]).trim(),
        shipped.seeded.base
    );
    assert_eq!(
        fs_err::read_to_string(boxdir.join("a.txt")).expect("a"),
        "changed\n"
    );
}

/// 200 commits, each replacing a 110 kB blob of noise (incompressible): about 22 MB at depth
/// 200, 11 MB at depth 100. Made with `git fast-import`, in one process.
fn heavy_history(root: &Path) {
    use std::io::Write;
    run(root, &["init", "-q", "-b", "main"]);
    let mut child = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["fast-import", "--quiet"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("fast-import");
    let mut stdin = std::io::BufWriter::new(child.stdin.take().expect("stdin"));
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..200 {
        let blob: Vec<u8> = (0..110_000)
            .map(|_| {
                // xorshift64: noise git cannot compress or delta.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect();
        write!(
            stdin,
            "commit refs/heads/main\ncommitter u <u@x> {} +0000\ndata 4\nc{i:03}\nM 100644 inline noise.bin\ndata {}\n",
            1_700_000_000 + i,
            blob.len()
        )
        .expect("stream");
        stdin.write_all(&blob).expect("stream");
        stdin.write_all(b"\n").expect("stream");
    }
    drop(stdin);
    assert!(child.wait().expect("fast-import").success());
    run(root, &["reset", "-q", "--hard"]);
}

#[test]
fn an_adaptive_shipment_over_the_limit_is_redone_at_100() {
    let d = tempfile::tempdir().expect("tempdir");
    let host = d.path().join("host");
    fs_err::create_dir(&host).expect("mkdir");
    heavy_history(&host);
    let repo = crate::detect(&host).expect("detect").expect("a repository");
    let shipped = ship(&repo, "b", &opts(&d.path().join("stage"), Depth::Adaptive)).expect("ship");
    assert_eq!(shipped.form, Form::Full { depth: Some(100) });
    assert!(
        shipped.git_tar_bytes > 100 * 110_000,
        "{}",
        shipped.git_tar_bytes
    );
    assert!(
        shipped.git_tar_bytes < ADAPTIVE_LIMIT,
        "{}",
        shipped.git_tar_bytes
    );
    let boxdir = d.path().join("box");
    fs_err::create_dir(&boxdir).expect("mkdir");
    exec(&shipped.steps(boxdir.to_str().expect("utf-8")));
    assert_eq!(run(&boxdir, &["rev-list", "--count", "HEAD"]).trim(), "100");
    // A fixed depth is kept whatever it weighs.
    let fixed = ship(&repo, "c", &{
        let mut o = opts(&d.path().join("stage2"), Depth::Fixed(150));
        o.branch = "agentbox/c".into();
        o
    })
    .expect("ship");
    assert_eq!(fixed.form, Form::Full { depth: Some(150) });
    assert!(fixed.git_tar_bytes > ADAPTIVE_LIMIT - 5 * 1024 * 1024);
}
