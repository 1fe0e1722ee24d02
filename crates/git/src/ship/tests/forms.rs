//! The forms a repository takes: git-LFS objects, SHA-256, a history over the adaptive
//! limit.

use std::process::Command;

use super::*;

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

#[test]
fn a_delta_carries_only_the_lfs_objects_it_adds() {
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
    write(&host, "a.bin", "first object\n");
    run(&host, &["add", "-A"]);
    run(&host, &["commit", "-q", "-m", "a"]);
    let repo = crate::detect(&host).expect("detect").expect("a repository");
    let mut o = opts(&d.path().join("stage1"), Depth::Adaptive);
    o.seed.no_carry = true;
    o.branch = "agentbox/cp".into();
    let first = ship(&repo, "cp", &o).expect("ship");
    assert_eq!(first.lfs_objects, 1);
    let boxdir = d.path().join("box");
    fs_err::create_dir(&boxdir).expect("mkdir");
    let ws = boxdir.to_str().expect("utf-8");
    exec(&first.steps(ws));
    assert_eq!(
        fs_err::read_to_string(boxdir.join("a.bin")).expect("a"),
        "first object\n"
    );

    write(&host, "b.bin", "second object\n");
    run(&host, &["add", "b.bin"]);
    run(&host, &["commit", "-q", "-m", "b"]);
    let mut o = opts(&d.path().join("stage2"), Depth::Adaptive);
    o.seed.no_carry = true;
    let delta = ship_delta(&repo, "b", &first.seeded.base, &o)
        .expect("delta")
        .expect("from_tip serves");
    assert_eq!((delta.lfs_objects, delta.lfs_missing), (1, 0));
    let mut names = vec![];
    let mut archive = tar::Archive::new(fs_err::File::open(&delta.git_tar).expect("tar"));
    for e in archive.entries().expect("entries") {
        names.push(
            e.expect("entry")
                .path()
                .expect("path")
                .display()
                .to_string(),
        );
    }
    let pointer = run(&host, &["show", "HEAD:b.bin"]);
    let oid = pointer
        .lines()
        .find_map(|l| l.strip_prefix("oid sha256:"))
        .expect("a pointer");
    assert!(names.contains(&DELTA_BUNDLE.to_owned()), "{names:?}");
    assert!(
        names.contains(&format!(".git/{}", lfs::rel_path(oid).display())),
        "{names:?}"
    );
    assert_eq!(
        names
            .iter()
            .filter(|n| n.starts_with(".git/lfs/objects/") && n.len() > 60)
            .count(),
        1,
        "{names:?}"
    );
    assert!(exec(&delta.steps(ws)).is_empty());
    assert_eq!(
        fs_err::read_to_string(boxdir.join("b.bin")).expect("b"),
        "second object\n"
    );
    assert_eq!(run(&boxdir, &["status", "--porcelain"]), "");
}
