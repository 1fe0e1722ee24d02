//! Layer chains: the merged view (whiteouts, opaque directories) against a scan and
//! against what the kernel's overlayfs shows, and folds over a base.

use super::*;

/// Layers: `lower` (bottom), `upper` (top).
fn layers(home: &TempHome) -> (PathBuf, PathBuf) {
    let lower = home.path().join("lower");
    let upper = home.path().join("upper");
    fs_err::create_dir_all(lower.join("merged")).expect("mkdir");
    fs_err::create_dir_all(upper.join("merged")).expect("mkdir");
    fs_err::write(lower.join("merged/low"), b"low").expect("write");
    fs_err::write(upper.join("merged/up"), b"up").expect("write");
    fs_err::write(lower.join("merged/both"), b"lower version").expect("write");
    fs_err::write(upper.join("merged/both"), b"upper").expect("write");
    // file over dir
    fs_err::create_dir_all(lower.join("fod/deep")).expect("mkdir");
    fs_err::write(lower.join("fod/deep/x"), b"x").expect("write");
    fs_err::write(upper.join("fod"), b"now a file").expect("write");
    // opaque dir (user.overlay.* works without root)
    fs_err::create_dir_all(lower.join("opq")).expect("mkdir");
    fs_err::write(lower.join("opq/hidden"), b"h").expect("write");
    fs_err::create_dir_all(upper.join("opq")).expect("mkdir");
    fs_err::write(upper.join("opq/visible"), b"v").expect("write");
    xattr::set(upper.join("opq"), "user.overlay.opaque", b"y").expect("setxattr");
    // dir over file
    fs_err::write(lower.join("dof"), b"file").expect("write");
    fs_err::create_dir_all(upper.join("dof")).expect("mkdir");
    fs_err::write(upper.join("dof/child"), b"c").expect("write");
    (lower, upper)
}

/// `walk_chain` of a stack: what it hands over, in order. It must be exactly `scan_chain`'s
/// entries in `scan_chain`'s order.
fn walked(layers: &[&Path], opaque: &str) -> Vec<agentbox_store::fsops::Entry> {
    let mut out = Vec::new();
    agentbox_store::fsops::walk_chain(layers, opaque, &mut |e| {
        out.push(e);
        Ok(())
    })
    .expect("walk_chain");
    out
}

fn assert_walk_is_scan(layers: &[&Path], opaque: &str) {
    let scanned: Vec<_> = scan_chain(layers, opaque)
        .expect("scan_chain")
        .entries
        .into_values()
        .collect();
    assert_eq!(
        walked(layers, opaque),
        scanned,
        "walk_chain differs from scan_chain"
    );
}

fn rels(tree: &agentbox_store::fsops::Tree) -> Vec<String> {
    tree.entries
        .keys()
        .map(|p| p.display().to_string())
        .collect()
}

#[test]
fn chain_merges_and_hides() {
    let home = TempHome::new();
    let (lower, upper) = layers(&home);
    let tree = scan_chain(&[&upper, &lower], "user.overlay.opaque").expect("scan_chain");
    assert_walk_is_scan(&[&upper, &lower], "user.overlay.opaque");
    assert_eq!(
        rels(&tree),
        [
            "",
            "dof",
            "dof/child",
            "fod",
            "merged",
            "merged/both",
            "merged/low",
            "merged/up",
            "opq",
            "opq/visible"
        ]
    );
    let both = tree.get(Path::new("merged/both")).expect("both");
    assert_eq!(both.src, upper.join("merged/both"));
    assert_eq!(
        tree.get(Path::new("merged/low")).expect("low").src,
        lower.join("merged/low")
    );
    assert_eq!(
        tree.get(Path::new("fod")).expect("fod").meta.kind,
        Kind::File
    );
    let opq = tree.get(Path::new("opq")).expect("opq");
    assert!(opq.meta.xattrs.is_empty(), "overlay xattrs stripped");
    // The raw scan keeps them.
    let raw = scan_tree(&upper).expect("scan");
    assert!(raw
        .get(Path::new("opq"))
        .expect("opq")
        .meta
        .xattrs
        .contains_key("user.overlay.opaque"));

    // The merged tree copies like any tree.
    let dst = home.path().join("merged-copy");
    copy_tree(&tree, &dst, &CopyOpts::default()).expect("copy_tree");
    assert_eq!(
        fs_err::read(dst.join("merged/both")).expect("read"),
        b"upper"
    );
    assert!(!dst.join("opq/hidden").exists());
    assert!(read_meta(&dst.join("opq")).expect("meta").xattrs.is_empty());
}

#[test]
fn chain_whiteouts_and_trusted_opaque() {
    if !require_root("chain_whiteouts_and_trusted_opaque") {
        return;
    }
    let home = TempHome::new();
    let (lower, upper) = layers(&home);
    let mid = home.path().join("mid");
    fs_err::create_dir_all(mid.join("merged")).expect("mkdir");
    // whiteouts of a file and of a whole directory
    mknod(&mid.join("merged/low"), FileType::CharacterDevice, 0);
    fs_err::create_dir_all(lower.join("gone/sub")).expect("mkdir");
    fs_err::write(lower.join("gone/sub/f"), b"f").expect("write");
    mknod(&mid.join("gone"), FileType::CharacterDevice, 0);
    // a directory recreated above a whiteout
    fs_err::create_dir_all(lower.join("again")).expect("mkdir");
    fs_err::write(lower.join("again/old"), b"old").expect("write");
    mknod(&mid.join("again"), FileType::CharacterDevice, 0);
    fs_err::create_dir_all(upper.join("again")).expect("mkdir");
    fs_err::write(upper.join("again/new"), b"new").expect("write");
    // trusted opaque marker
    fs_err::create_dir_all(lower.join("topq")).expect("mkdir");
    fs_err::write(lower.join("topq/hidden"), b"h").expect("write");
    fs_err::create_dir_all(mid.join("topq")).expect("mkdir");
    xattr::set(mid.join("topq"), "trusted.overlay.opaque", b"y").expect("setxattr");
    xattr::set(mid.join("topq"), "trusted.keep", b"k").expect("setxattr");

    let tree = scan_chain(&[&upper, &mid, &lower], "trusted.overlay.opaque").expect("scan_chain");
    assert_walk_is_scan(&[&upper, &mid, &lower], "trusted.overlay.opaque");
    let names = rels(&tree);
    for gone in [
        "merged/low",
        "gone",
        "gone/sub",
        "gone/sub/f",
        "again/old",
        "topq/hidden",
    ] {
        assert!(
            !names.contains(&gone.to_string()),
            "{gone} visible: {names:?}"
        );
    }
    for seen in ["merged/up", "merged/both", "again", "again/new", "topq"] {
        assert!(
            names.contains(&seen.to_string()),
            "{seen} missing: {names:?}"
        );
    }
    let topq = tree.get(Path::new("topq")).expect("topq");
    assert_eq!(
        topq.meta.xattrs.keys().collect::<Vec<_>>(),
        ["trusted.keep"],
        "only overlay xattrs are stripped"
    );
    assert!(tree.entries.values().all(|e| !e.meta.is_whiteout()));
}

#[test]
fn chain_of_one_layer_is_scan_tree() {
    let home = TempHome::new();
    let src = home.path().join("src");
    let spec = agentbox_testkit::tree_gen::TreeSpec {
        root_mode: 0o755,
        root_xattrs: vec![("user.overlay.origin".into(), b"o".to_vec())],
        root_mtime: (1_000_000_000, 0),
        nodes: Vec::new(),
    };
    materialize(&spec, &src);
    fs_err::create_dir_all(src.join("a/b")).expect("mkdir");
    fs_err::write(src.join("a/b/f"), b"f").expect("write");
    xattr::set(src.join("a"), "user.x", b"1").expect("setxattr");
    let mut raw = scan_tree(&src).expect("scan");
    for e in raw.entries.values_mut() {
        e.meta.xattrs.retain(|k, _| !k.starts_with("user.overlay."));
    }
    assert_eq!(
        scan_chain(&[&src], "trusted.overlay.opaque").expect("chain"),
        raw
    );
}

/// A deterministic stream of small random numbers (xorshift).
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Fill directory `dir` of layer `layer` with entries named from a small alphabet, so that
/// the layers of a stack collide on names: files, symlinks and directories over one
/// another, whiteouts (0/0 devices), and directories marked opaque the way a privileged
/// overlayfs reads it. Some files and directories carry the markers of the other namespace
/// (`user.overlay.whiteout`, `user.overlay.opaque`), which a box can set and which mark
/// nothing for a privileged overlay. Directory mtimes are set after their children.
fn fill_layer_dir(dir: &Path, rel: &str, layer: usize, depth: usize, dice: &mut Dice) {
    for name in ["a", "b", "c", "d"] {
        let path = dir.join(name);
        let child_rel = format!("{rel}/{name}");
        let choice = dice.below(if depth < 3 { 9 } else { 6 });
        match choice {
            0 | 1 => continue,
            2 | 3 => write_and_set_times(
                &path,
                format!("{child_rel} in layer {layer}\n").as_bytes(),
                [0o644, 0o600, 0o755][dice.below(3) as usize],
                (1_600_000_000 + dice.below(1000) as i64, 0),
            ),
            4 => fs_err::os::unix::fs::symlink(format!("target-{layer}"), &path).expect("symlink"),
            5 => mknod(&path, FileType::CharacterDevice, 0),
            _ => {
                fs_err::create_dir(&path).expect("mkdir");
                fill_layer_dir(&path, &child_rel, layer, depth + 1, dice);
                if choice == 8 {
                    xattr::set(&path, "trusted.overlay.opaque", b"y").expect("setxattr");
                } else if dice.below(6) == 0 {
                    xattr::set(&path, "user.overlay.opaque", b"y").expect("setxattr");
                }
                set_mode(&path, [0o755, 0o750, 0o700][dice.below(3) as usize]);
                set_mtime(&path, 1_500_000_000 + dice.below(1000) as i64, 0);
            }
        }
        if choice < 4 && dice.below(6) == 0 {
            xattr::set(&path, "user.overlay.whiteout", b"").expect("setxattr");
        }
        if choice != 5 && dice.below(4) == 0 {
            xattr::set(&path, "trusted.layer", layer.to_string().as_bytes()).expect("setxattr");
        }
    }
}

/// The fields of an entry that the merged view shows, for comparing our merge with the
/// kernel's: everything but the identity of the inode (and the times the kernel sets).
fn shown(e: &agentbox_store::fsops::Entry) -> String {
    let m = &e.meta;
    let xattrs: Vec<_> = m
        .xattrs
        .iter()
        .filter(|(k, _)| !k.starts_with("trusted.overlay.") && !k.starts_with("user.overlay."))
        .collect();
    format!(
        "{} {:?} {:o} {}:{} size {} mtime {} {:?} {:?}",
        e.rel.display(),
        m.kind,
        m.perm,
        m.uid,
        m.gid,
        m.size,
        m.mtime_sec,
        m.target,
        xattrs
    )
}

/// What a program sees below a directory of a mounted overlayfs: [`shown`] lines in path
/// order and the content of each file. A directory that comes from one layer alone is read
/// straight from it, so its listing still names the whiteouts in it; looking such a name up
/// finds nothing, as for any path a whiteout hides. Such names are not part of the view;
/// they are collected as phantoms.
#[derive(Debug, Default, PartialEq)]
struct View {
    lines: Vec<String>,
    files: BTreeMap<PathBuf, Vec<u8>>,
    phantoms: Vec<PathBuf>,
}

/// Add what is below `dir` (at `rel` in the view) to `view`.
fn walk_view(dir: &Path, rel: &Path, view: &mut View) {
    let mut names: Vec<_> = fs_err::read_dir(dir)
        .expect("read a directory of the view")
        .map(|e| e.expect("read a directory entry of the view").file_name())
        .collect();
    names.sort();
    for name in names {
        let path = dir.join(&name);
        let meta = match read_meta(&path) {
            Ok(m) => m,
            Err(agentbox_store::Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                view.phantoms.push(rel.join(&name));
                continue;
            }
            Err(e) => panic!("lstat {}: {e}", path.display()),
        };
        let entry = agentbox_store::fsops::Entry {
            rel: rel.join(&name),
            src: path.clone(),
            meta,
        };
        view.lines.push(shown(&entry));
        if entry.meta.is_dir() {
            walk_view(&path, &entry.rel, view);
        } else if entry.meta.kind == Kind::File {
            let content = fs_err::read(&path).expect("read a file of the view");
            view.files.insert(entry.rel, content);
        }
    }
}

/// A stack of `count` random layers (top first) made by [`fill_layer_dir`] under `home`.
fn random_stack(home: &TempHome, seed: u64, count: usize) -> Vec<PathBuf> {
    let mut dice = Dice(seed | 1);
    (0..count)
        .map(|i| {
            let dir = home.path().join(format!("layer{i}"));
            fs_err::create_dir(&dir).expect("mkdir layer");
            fill_layer_dir(&dir, "", i, 0, &mut dice);
            // Now and then a layer below the top hides everything under it.
            if i > 0 && dice.below(8) == 0 {
                xattr::set(&dir, "trusted.overlay.opaque", b"y").expect("setxattr");
            }
            dir
        })
        .collect()
}

/// What the kernel shows of the stack `lowers` (top first), mounted read-only at
/// `home/<name>`.
fn kernel_view(home: &TempHome, lowers: &[&Path], name: &str) -> View {
    let view = home.path().join(name);
    fs_err::create_dir(&view).expect("mkdir view");
    crate::common::mount_overlay_ro(lowers, &view);
    let mut shown = View::default();
    walk_view(&view, Path::new(""), &mut shown);
    rustix::mount::unmount(&view, rustix::mount::UnmountFlags::DETACH).expect("unmount");
    shown
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    /// `scan_chain` merges a stack of layers exactly as overlayfs does: the kernel's view of
    /// the same stack, mounted read-only, is the oracle.
    #[test]
    fn chain_merges_like_the_kernel(seed in any::<u64>(), count in 2usize..6) {
        if !require_root("chain_merges_like_the_kernel") {
            return Ok(());
        }
        let home = TempHome::new();
        let layers = random_stack(&home, seed, count);
        let refs: Vec<&Path> = layers.iter().map(PathBuf::as_path).collect();
        let ours = scan_chain(&refs, "trusted.overlay.opaque").expect("scan_chain");
        // The walk that exports stream from is held to the same oracle, through scan_chain.
        let walk = walked(&refs, "trusted.overlay.opaque");
        prop_assert_eq!(&walk, &ours.entries.values().cloned().collect::<Vec<_>>());
        let kernel = kernel_view(&home, &refs, "view");
        let ours_shown: Vec<String> = ours.entries.values().skip(1).map(shown).collect();
        prop_assert_eq!(ours_shown, kernel.lines);
        for (rel, seen) in kernel.files {
            let src = &ours.get(&rel).expect("the kernel shows no file we lack").src;
            prop_assert_eq!(&fs_err::read(src).expect("read provider"), &seen, "{}", rel.display());
        }
        // Every entry names the layer that provides it.
        for e in ours.entries.values() {
            prop_assert!(layers.iter().any(|l| e.src == l.join(&e.rel)), "{}", e.src.display());
        }
    }

    /// Folding the top layers of a stack into one changes nothing the kernel shows: the
    /// folded layer over the layers below it shows what the whole stack shows. Both ways a
    /// fold is made: in memory (`fold_over_base`: a flatten of a box, the compaction of a
    /// deep chain) and on disk, one layer applied after the other (`apply_overlay_layer`:
    /// a box's commit on btrfs). Told the layers below (what a compaction does), the fold
    /// leaves out the whiteouts that hide nothing of them, and lists no name it cannot
    /// open that the layers below do not list already.
    #[test]
    fn a_fold_over_a_base_shows_what_the_stack_shows(
        seed in any::<u64>(),
        count in 3usize..7,
        base_len in 1usize..3,
    ) {
        if !require_root("a_fold_over_a_base_shows_what_the_stack_shows") {
            return Ok(());
        }
        use agentbox_store::backend::apply::{apply_overlay_layer, fold_over_base};
        const OPQ: &str = "trusted.overlay.opaque";
        let home = TempHome::new();
        let layers = random_stack(&home, seed, count);
        let refs: Vec<&Path> = layers.iter().map(PathBuf::as_path).collect();
        let (above, base) = refs.split_at(count - base_len.min(count - 2));
        let stack = kernel_view(&home, &refs, "stack");

        let in_memory = home.path().join("in-memory");
        fold_over_base(above, &in_memory, OPQ, None, None).expect("fold");
        let on_disk = home.path().join("on-disk");
        copy_dir(above[above.len() - 1], &on_disk, &CopyOpts::default()).expect("copy");
        for layer in above[..above.len() - 1].iter().rev() {
            apply_overlay_layer(layer, &on_disk, OPQ, None).expect("apply");
        }
        let pruned = home.path().join("pruned");
        let below = agentbox_store::backend::apply::Below::new(
            base.iter().map(|p| p.to_path_buf()).collect(),
            None,
        );
        fold_over_base(above, &pruned, OPQ, None, Some(&below)).expect("fold");
        // What the layers below list but cannot open themselves.
        let base_phantoms: Vec<PathBuf> = if base.len() > 1 {
            kernel_view(&home, base, "base").phantoms
        } else {
            scan_tree(base[0])
                .expect("scan")
                .entries
                .into_iter()
                .filter(|(_, e)| e.meta.is_whiteout())
                .map(|(rel, _)| rel)
                .collect()
        };
        for folded in [&in_memory, &on_disk, &pruned] {
            let name = folded.file_name().expect("a name").to_string_lossy();
            let mut lowers = vec![folded.as_path()];
            lowers.extend_from_slice(base);
            let view = kernel_view(&home, &lowers, &format!("{name}-view"));
            prop_assert_eq!(&view.lines, &stack.lines, "{}", name);
            prop_assert_eq!(&view.files, &stack.files, "{}", name);
            if folded == &pruned {
                for p in &view.phantoms {
                    prop_assert!(
                        base_phantoms.contains(p),
                        "{} is listed but cannot be opened", p.display()
                    );
                }
            }
        }
    }
}

/// A fold told its base never looks into a mount below the base (a box's names must not make
/// the host enter an automounter's directory or a network filesystem) nor through a symlink
/// of it. Like overlayfs, which sees the directory a mount covers, it takes a mount point as
/// an empty directory: a whiteout in it is kept, one below it goes — although the tmpfs
/// mounted there has the directory. A whiteout in a directory the base has is kept, one in
/// a directory the base lacks or has only as a symlink goes.
#[test]
fn a_fold_does_not_look_into_mounts_of_its_base() {
    if !require_root("a_fold_does_not_look_into_mounts_of_its_base") {
        return;
    }
    let home = TempHome::new();
    let base = home.path().join("base");
    fs_err::create_dir_all(base.join("mnt/point")).expect("mkdir");
    rustix::mount::mount(
        "tmpfs",
        base.join("mnt/point"),
        "tmpfs",
        rustix::mount::MountFlags::empty(),
        c"size=1m",
    )
    .expect("mount a tmpfs in the base");
    fs_err::create_dir_all(base.join("mnt/point/sub")).expect("mkdir in the tmpfs");
    // A symlink of the base is no directory, wherever it points.
    fs_err::create_dir_all(base.join("real")).expect("mkdir");
    fs_err::os::unix::fs::symlink("real", base.join("link")).expect("symlink");
    let layer = home.path().join("layer");
    for dir in ["mnt/point", "mnt/point/sub", "nowhere", "link", "real"] {
        fs_err::create_dir_all(layer.join(dir)).expect("mkdir");
        mknod(&layer.join(dir).join("gone"), FileType::CharacterDevice, 0);
    }
    let folded = home.path().join("folded");
    let result = agentbox_store::backend::apply::fold_over_base(
        &[&layer],
        &folded,
        "trusted.overlay.opaque",
        None,
        Some(&agentbox_store::backend::apply::Below::new(
            Vec::new(),
            Some(agentbox_store::backend::BoxBase {
                root: base.clone(),
                hidden: Vec::new(),
                shown: Vec::new(),
            }),
        )),
    );
    rustix::mount::unmount(base.join("mnt/point"), rustix::mount::UnmountFlags::DETACH)
        .expect("unmount");
    result.expect("fold");
    let kept = |p: &str| std::fs::symlink_metadata(folded.join(p)).is_ok();
    assert!(
        kept("mnt/point/gone"),
        "kept: in a mount point of the base (its covered directory exists)"
    );
    assert!(
        !kept("mnt/point/sub/gone"),
        "gone: below a mount point, the covered directory is taken as empty"
    );
    assert!(
        !kept("nowhere/gone"),
        "gone: the base has no such directory"
    );
    assert!(
        !kept("link/gone"),
        "gone: a symlink of the base is not followed"
    );
    assert!(kept("real/gone"), "kept: the base has the directory");
}
