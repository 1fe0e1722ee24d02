//! Property tests: random editing sessions check out exactly, random trees survive an
//! export/import round trip; and a directory deleted and recreated across layers.

use super::*;

/// One step of a random editing session on a working tree.
#[derive(Debug, Clone)]
enum Op {
    Write(usize, u8),
    Append(usize),
    Remove(usize),
    Mkdir(usize),
    Chmod(usize, u32),
    Rename(usize, usize),
    Symlink(usize, usize),
    Hardlink(usize, usize),
    Commit,
}

/// A small namespace so that operations collide: files replace directories, directories are
/// deleted and recreated (overlay opaque directories), renames move whole subtrees.
const PATHS: [&str; 8] = ["a", "b", "a/x", "a/y", "a/x/deep", "b/z", "c", "a/y/w"];

/// Where proptest keeps the cases it once found failing: `random.proptest-regressions`
/// next to this file. The default (`SourceParallel`) stops at the directory holding the
/// binary's `main.rs` and would read `tests/proptest-regressions/conformance.txt` instead.
fn regressions() -> Option<Box<dyn proptest::test_runner::FailurePersistence>> {
    Some(Box::new(
        proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
    ))
}

fn op_strategy() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    let p = 0..PATHS.len();
    prop_oneof![
        (p.clone(), any::<u8>()).prop_map(|(i, b)| Op::Write(i, b)),
        p.clone().prop_map(Op::Append),
        p.clone().prop_map(Op::Remove),
        p.clone().prop_map(Op::Mkdir),
        (
            p.clone(),
            prop::sample::select(vec![0o644, 0o4755, 0o600, 0o1777, 0o2750])
        )
            .prop_map(|(i, m)| Op::Chmod(i, m)),
        (p.clone(), p.clone()).prop_map(|(a, b)| Op::Rename(a, b)),
        (p.clone(), p.clone()).prop_map(|(a, b)| Op::Symlink(a, b)),
        (p.clone(), p).prop_map(|(a, b)| Op::Hardlink(a, b)),
        Just(Op::Commit),
        Just(Op::Commit),
    ]
}

/// Apply an operation; failures (missing parents, wrong types) are part of the game.
fn apply(root: &Path, op: &Op) {
    use std::os::unix::fs::PermissionsExt;
    let p = |i: usize| root.join(PATHS[i]);
    let _ = match op {
        Op::Write(i, b) => {
            let path = p(*i);
            if let Some(parent) = path.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            std::fs::write(&path, vec![*b; (*b as usize) * 37 % 5000])
        }
        Op::Append(i) => std::fs::OpenOptions::new()
            .append(true)
            .open(p(*i))
            .and_then(|mut f| std::io::Write::write_all(&mut f, b"more\n")),
        Op::Remove(i) => {
            let path = p(*i);
            if path.is_dir() && !path.is_symlink() {
                std::fs::remove_dir_all(path)
            } else {
                std::fs::remove_file(path)
            }
        }
        Op::Mkdir(i) => std::fs::create_dir_all(p(*i)),
        Op::Chmod(i, m) => {
            if p(*i).is_symlink() {
                Ok(())
            } else {
                std::fs::set_permissions(p(*i), std::fs::Permissions::from_mode(*m))
            }
        }
        Op::Rename(a, b) => std::fs::rename(p(*a), p(*b)),
        Op::Symlink(a, b) => std::os::unix::fs::symlink(PATHS[*a], p(*b)),
        Op::Hardlink(a, b) => std::fs::hard_link(p(*a), p(*b)),
        Op::Commit => Ok(()),
    };
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 12, failure_persistence: regressions(), ..Default::default() })]

    /// After any editing session with commits in between, checking out each node gives
    /// back exactly the tree that was committed (every backend).
    #[test]
    fn random_sessions_check_out_exactly(ops in proptest::collection::vec(op_strategy(), 1..40)) {
        for fx in fixtures("random_sessions_check_out_exactly") {
            let store = fx.store();
            let dir = fx.dir("rnd");
            let refs = fx.base.join("rndrefs");
            let _ = std::fs::remove_dir_all(&refs);
            let st = store.create_env("rnd", Some(&dir), Source::Empty, "empty").expect("create");
            let mut nodes = vec![(st.head.clone(), refs.join("0"))];
            snapshot_copy(&dir, &nodes[0].1);
            for (i, op) in ops.iter().chain(std::iter::once(&Op::Commit)).enumerate() {
                if let Op::Commit = op {
                    let id = commit(&store, "rnd", &format!("step {i}"));
                    let r = refs.join((i + 1).to_string());
                    snapshot_copy(&dir, &r);
                    nodes.push((id, r));
                } else {
                    apply(&dir, op);
                }
            }
            for (id, r) in nodes.iter().rev().chain(nodes.iter()) {
                store.checkout("rnd", id).expect("checkout");
                assert_same(r, &dir, &format!("{:?} node {id} after {ops:?}", fx.kind));
            }
            store.remove_env("rnd").expect("destroy");
        }
    }
}

/// A directory deleted and recreated hides what was below it once, and later layers that
/// add to it do not hide what the earlier layers added (overlay opaque directories).
#[test]
fn recreated_directory_keeps_later_additions() {
    for fx in fixtures("recreated_directory_keeps_later_additions") {
        let store = fx.store();
        let src = fx.base.join("odsrc");
        write(&src.join("a/old"), "old");
        let dir = fx.dir("od");
        store
            .create_env("od", Some(&dir), Source::Dir(src), "initial")
            .expect("create");
        std::fs::remove_dir_all(dir.join("a")).expect("rm");
        write(&dir.join("a/new1"), "1");
        commit(&store, "od", "recreated");
        write(&dir.join("a/new2"), "2");
        commit(&store, "od", "added");
        store.checkout("od", "HEAD").expect("checkout");
        let mut names: Vec<String> = std::fs::read_dir(dir.join("a"))
            .expect("readdir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, vec!["new1", "new2"], "{:?}", fx.kind);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 10, failure_persistence: regressions(), ..Default::default() })]

    /// Fidelity: a random tree (every file type, setuid/setgid/sticky, owners, xattrs, sparse
    /// files, hardlinks, dangling symlinks, directory mtimes) survives create → commit →
    /// checkout → export → import exactly, on every backend.
    #[test]
    fn random_trees_survive_the_round_trip(spec in agentbox_testkit::tree_gen::tree_spec()) {
        for fx in fixtures("random_trees_survive_the_round_trip") {
            let src = fx.base.join("fidsrc");
            let _ = std::fs::remove_dir_all(&src);
            agentbox_testkit::tree_gen::materialize(&spec, &src);
            let store = fx.store();
            let dir = fx.dir("fid");
            store.create_env("fid", Some(&dir), Source::Dir(src.clone()), "tree").expect("create");
            assert_same(&src, &dir, "created");
            write(&dir.join("extra-file"), "x");
            commit(&store, "fid", "extra");
            store.checkout("fid", "HEAD~1").expect("checkout");
            assert_same(&src, &dir, "checked out");
            let bundle = fx.base.join("fid.bundle");
            for kind in ["snapshot", "history"] {
                agentbox_store::transfer::export(
                    &store, "fid", "HEAD", kind.parse().expect("kind"),
                    "zstd".parse().expect("zstd"), &bundle,
                ).expect("export");
                let other = Store::open_or_init(&fx.base.join(format!("fid-{kind}")), Some(fx.kind))
                    .expect("store");
                let d2 = fx.dir(&format!("fid-{kind}"));
                agentbox_store::transfer::import(
                    &other,
                    bundle.to_str().expect("utf8"),
                    "back",
                    &d2,
                    agentbox_store::transfer::ImportOptions {
                        allow_devices: true,
                        allow_setuid: true,
                        max_size: None,
                    },
                )
                    .expect("import");
                // The tree's trusted.* xattrs (made as root) travel in the bundle and are
                // never applied by an import; everything else comes back exactly.
                let diffs: Vec<String> = agentbox_store::fsops::compare_exact(&src, &d2)
                    .expect("compare")
                    .into_iter()
                    .filter(|d| !d.ends_with("xattrs differ: -trusted.t0"))
                    .collect();
                assert!(diffs.is_empty(), "{kind}: trees differ:\n{}", diffs.join("\n"));
                other.remove_env("back").expect("destroy");
            }
            store.remove_env("fid").expect("destroy");
        }
    }
}
