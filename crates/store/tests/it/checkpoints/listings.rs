//! Cleanup plans from layer listings agree with a full scan, on planted secrets.

use super::*;

/// The cleanup of a box's checkpoint: [`Cleanup::checkpoint`] plus the secret-bearing files
/// the boxes layer adds (`git.envPatterns` under `/workspace`, agents' credentials).
fn secret_cleanup() -> Cleanup {
    let mut c = Cleanup::checkpoint();
    c.delete.extend(
        [
            "/workspace/**/.env",
            "/workspace/**/.env.*",
            "/workspace/**/*.env",
            "**/.claude/.credentials.json",
            "**/.git-credentials",
            "**/.netrc",
        ]
        .map(String::from),
    );
    c
}

/// Files a derive must find wherever they are: `(path below a directory of the tree,
/// content)`. Anchored ones (`tmp/`, `var/`, `workspace/`) are put at the root.
const PLANTED: [(&str, &str); 10] = [
    (".bash_history", "rm -rf /\n"),
    (".claude/.credentials.json", "{\"token\": \"sk-secret\"}"),
    (".npm/_logs/1-debug.log", "npm log"),
    (".netrc", "machine x password y"),
    ("tmp/scratch/x", "tmp"),
    ("var/log/sub/app.log", "log line\n"),
    ("var/lib/apt/lists/main", "lists"),
    ("workspace/.env", "TOKEN=1"),
    ("workspace/deep/er/prod.env", "TOKEN=2"),
    ("workspace/\u{e9}t\u{e9}/.env.local", "TOKEN=3"),
];

/// Plant `picks` (`(directory index, planted index)`) below directories of `spec`
/// materialized at `root`, and, for one pick, a second name of the planted file (a hard
/// link the cleanup must empty too) and a directory whose name is not UTF-8.
fn plant(
    root: &Path,
    spec: &agentbox_testkit::tree_gen::TreeSpec,
    picks: &[(proptest::sample::Index, usize)],
) {
    use agentbox_testkit::tree_gen::NodeKind;
    use std::os::unix::ffi::OsStrExt;
    let mut dirs: Vec<PathBuf> = vec![PathBuf::new()];
    dirs.extend(
        spec.nodes
            .iter()
            .filter(|n| n.kind == NodeKind::Dir)
            .map(|n| n.path.clone()),
    );
    for (i, (dir, which)) in picks.iter().enumerate() {
        let (rel, content) = PLANTED[*which % PLANTED.len()];
        let anchored = ["tmp/", "var/", "workspace/"]
            .iter()
            .any(|a| rel.starts_with(a));
        let base = if anchored {
            PathBuf::new()
        } else {
            dir.get(&dirs).clone()
        };
        let path = root.join(&base).join(rel);
        // A planted path may run into a file of the random tree: then it is not planted.
        if path
            .parent()
            .is_some_and(|p| std::fs::create_dir_all(p).is_err())
        {
            continue;
        }
        let _ = std::fs::remove_dir_all(&path);
        if std::fs::write(&path, content).is_err() {
            continue;
        }
        if i == 0 && rel == ".bash_history" {
            let _ = std::fs::hard_link(&path, path.with_file_name("history-link"));
        }
    }
    let odd = root
        .join("workspace")
        .join(std::ffi::OsStr::from_bytes(b"\xff\xfe"));
    std::fs::create_dir_all(&odd).expect("mkdir");
    std::fs::write(odd.join(".env"), "TOKEN=4").expect("write");
}

/// One line per entry of `dirs`' merged tree as [`tree_lines`] has it, after `plan` is
/// applied to the lines: the removed entries (and what is below them) gone, the emptied
/// files empty. What the derived node's tree must be.
fn lines_after<P: AsRef<Path>>(dirs: &[P], plan: &agentbox_store::CleanupPlan) -> Vec<String> {
    let removed: Vec<&Path> = plan.delete.iter().map(|e| e.rel.as_path()).collect();
    let emptied: BTreeSet<&Path> = plan.truncate.iter().map(|e| e.rel.as_path()).collect();
    let empty_hash = blake3::hash(b"").to_hex().to_string();
    let refs: Vec<&Path> = dirs.iter().map(AsRef::as_ref).collect();
    let tree = scan_chain(&refs, OPAQUE).expect("scan");
    let mut out = Vec::new();
    for ((rel, e), line) in tree.entries.iter().zip(tree_lines(dirs)) {
        if removed.iter().any(|r| rel.starts_with(r)) {
            continue;
        }
        if !emptied.contains(rel.as_path()) {
            out.push(line);
            continue;
        }
        // Size and content hash of the emptied file; the rest of the line is unchanged.
        let size = format!(" {} ", e.meta.size);
        let mut fields: Vec<String> = line.split(' ').map(str::to_owned).collect();
        let last = fields.len() - 1;
        fields[last] = empty_hash.clone();
        let line = fields.join(" ").replacen(&size, " 0 ", 1);
        out.push(line);
    }
    out
}

/// The plan found from the listings is the plan of a scan of the whole tree.
fn assert_plans_agree(store: &Store, node: &Node, cleanup: &Cleanup, what: &str) {
    let fast = store
        .cleanup_plan(node, cleanup)
        .expect("plan from listings");
    let dirs = store.chain_dirs(node).expect("chain");
    let refs: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
    let full = cleanup
        .plan(&scan_chain(&refs, OPAQUE).expect("scan"))
        .expect("plan");
    assert_eq!(fast, full, "{what}");
}

/// The paths of the merged tree of `node` that still hold a planted secret: a `.netrc`, a
/// `.claude/.credentials.json`, a `.env`-like file under `workspace/`, a non-empty
/// `.bash_history`.
fn secrets_left(store: &Store, node: &Node) -> Vec<String> {
    let dirs = store.chain_dirs(node).expect("chain");
    let refs: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
    let is_secret = |e: &agentbox_store::fsops::Entry| {
        let Some(name) = e.rel.file_name().and_then(|n| n.to_str()) else {
            return false;
        };
        let parent = e.rel.parent().and_then(|p| p.file_name());
        let in_workspace = e.rel.starts_with("workspace");
        e.meta.kind == Kind::File
            && match name {
                ".netrc" => true,
                ".credentials.json" => parent == Some(std::ffi::OsStr::new(".claude")),
                ".bash_history" => e.meta.size > 0,
                n => in_workspace && (n == ".env" || n.starts_with(".env.") || n.ends_with(".env")),
            }
    };
    scan_chain(&refs, OPAQUE)
        .expect("scan")
        .entries
        .values()
        .filter(|e| is_secret(e))
        .map(|e| e.rel.to_string_lossy().into_owned())
        .collect()
}

/// Derive on random trees spread over several layers, as a box makes them: files planted
/// anywhere (secrets deep in the tree, under a name that is not UTF-8, hard-linked
/// histories), hidden again by whiteouts and opaque directories of later layers, then a
/// box started from the checkpoint adds its own. The plan found from the layers' listings
/// (skipping what a derive already cleaned) is always the plan of a full scan, the derived
/// tree is the reference plan applied, and no planted secret is left; also with listings
/// missing, torn or walked again, and with a cleanup the lower layers were not cleaned by.
#[test]
fn derive_from_listings_matches_a_full_scan() {
    use agentbox_testkit::tree_gen::{materialize, tree_spec};
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    for fx in fixtures("derive_from_listings_matches_a_full_scan") {
        let store = fx.store();
        let kind = fx.kind;
        let cleanup = secret_cleanup();
        let picks =
            || prop::collection::vec((any::<proptest::sample::Index>(), 0..PLANTED.len()), 0..8);
        let strategy = (
            tree_spec(),
            picks(),
            tree_spec(),
            picks(),
            picks(),
            any::<bool>(),
        );
        let mut runner = TestRunner::new(Config {
            cases: 12,
            failure_persistence: None,
            ..Config::default()
        });
        let case = std::cell::Cell::new(0u32);
        runner
            .run(&strategy, |(t1, p1, t2, p2, p3, mounted)| {
                let n = case.get();
                case.set(n + 1);
                let env = format!("px{n}");
                let what = |step: &str| {
                    format!(
                        "{kind:?} case {n} ({}): {step}",
                        if mounted { "mounted" } else { "box" }
                    )
                };
                // Layer 1: the first tree with secrets planted in it.
                let src = fx.base.join(format!("{env}-src"));
                materialize(&t1, &src);
                plant(&src, &t1, &p1);
                let dir = fx.dir(&env);
                let mountpoint = mounted.then_some(dir.as_path());
                store
                    .create_env(&env, mountpoint, Source::Dir(src.clone()), "initial")
                    .expect("create");
                // Layer 2: a second tree written over it, more secrets, some of the first
                // layer's hidden (whiteouts) or replaced (an opaque directory).
                let top = if mounted {
                    dir.clone()
                } else {
                    store.box_layers(&env).expect("box").upper
                };
                let second = fx.base.join(format!("{env}-second"));
                materialize(&t2, &second);
                plant(&second, &t2, &p2);
                copy_over(&second, &top.join("workspace/second"));
                let first: Vec<PathBuf> = scan_tree(&src)
                    .expect("scan")
                    .entries
                    .into_keys()
                    .filter(|p| !p.as_os_str().is_empty())
                    .collect();
                for (i, rel) in first.iter().enumerate() {
                    if i % 3 != 0 {
                        continue;
                    }
                    let at = top.join(rel);
                    if mounted {
                        let _ = std::fs::remove_dir_all(&at).or_else(|_| std::fs::remove_file(&at));
                    } else if at
                        .parent()
                        .is_some_and(|p| std::fs::create_dir_all(p).is_ok())
                        && std::fs::symlink_metadata(&at).is_err()
                    {
                        if i % 2 == 0 {
                            whiteout(&at);
                        } else if src.join(rel).is_dir() && !src.join(rel).is_symlink() {
                            std::fs::create_dir(&at).expect("mkdir");
                            xattr::set(&at, "trusted.overlay.opaque", b"y").expect("opaque");
                            write(&at.join(".netrc"), "in an opaque directory");
                        }
                    }
                }
                let head = store.node(&commit(&store, &env, "second")).expect("node");
                assert_plans_agree(&store, &head, &cleanup, &what("two layers"));

                // The checkpoint: its tree is the reference plan applied, with no secret.
                let ckpt = format!("checkpoints/0123456789abcdef/{env}");
                let head_dirs = store.chain_dirs(&head).expect("chain");
                let reference = {
                    let refs: Vec<&Path> = head_dirs.iter().map(PathBuf::as_path).collect();
                    cleanup
                        .plan(&scan_chain(&refs, OPAQUE).expect("scan"))
                        .expect("plan")
                };
                let derived = store
                    .derive(&env, "HEAD", &cleanup, DetachOpts::new(&ckpt, "warm"))
                    .expect("derive")
                    .node;
                let derived_dirs = store.chain_dirs(&derived).expect("chain");
                assert_eq!(
                    tree_lines(&derived_dirs),
                    lines_after(&head_dirs, &reference),
                    "{}",
                    what("derived tree")
                );
                assert_eq!(
                    secrets_left(&store, &derived),
                    Vec::<String>::new(),
                    "{}",
                    what("secrets")
                );

                // A box from the checkpoint adds its own secrets; the checkpoint's layer is
                // clean for this cleanup, so only what is above it is looked at.
                let child = format!("{env}-b");
                store.fork_node(&ckpt, &child, None).expect("fork");
                let upper = store.box_layers(&child).expect("box").upper;
                let third = fx.base.join(format!("{env}-third"));
                materialize(&t1, &third);
                plant(&third, &t1, &p3);
                copy_over(&third, &upper);
                let child_head = store.node(&commit(&store, &child, "third")).expect("node");
                assert_plans_agree(&store, &child_head, &cleanup, &what("over a checkpoint"));
                let again = store
                    .derive(
                        &child,
                        "HEAD",
                        &cleanup,
                        DetachOpts::new(format!("{ckpt}-2"), "warm"),
                    )
                    .expect("derive")
                    .node;
                assert_eq!(
                    secrets_left(&store, &again),
                    Vec::<String>::new(),
                    "{}",
                    what("secrets over a checkpoint")
                );
                // A cleanup the checkpoint did not apply looks at every layer.
                let mut more = cleanup.clone();
                more.delete.push("**/f*".into());
                assert_plans_agree(&store, &child_head, &more, &what("another cleanup"));

                // Listings lost, torn or never written: walked (and kept) instead.
                for (i, layer) in store.chain(&child_head).expect("chain").iter().enumerate() {
                    let listing = store
                        .root()
                        .join("layers")
                        .join(format!("{}.paths", layer.id));
                    match i % 3 {
                        0 => {
                            let _ = std::fs::remove_file(&listing);
                        }
                        1 => {
                            let _ = std::fs::write(
                                &listing,
                                b"agentbox-layer-paths 1\nbase -\ncount 0\n",
                            );
                        }
                        _ => {}
                    }
                }
                assert_plans_agree(&store, &child_head, &more, &what("listings lost"));
                assert_plans_agree(&store, &head, &cleanup, &what("listings lost, below"));
                assert_plans_agree(&store, &child_head, &more, &what("listings walked again"));

                for e in [&child, &env] {
                    store.remove_env(e).expect("remove");
                }
                for r in [ckpt.clone(), format!("{ckpt}-2")] {
                    store.set_ref(&r, None).expect("unref");
                }
                store.gc().expect("gc");
                assert_clean(&store, &what("after gc"));
                let left: Vec<String> = std::fs::read_dir(store.root().join("layers"))
                    .expect("layers")
                    .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                    .filter(|n| n.ends_with(".paths"))
                    .collect();
                assert_eq!(
                    left,
                    Vec::<String>::new(),
                    "{}",
                    what("listings freed with their layers")
                );
                Ok(())
            })
            .expect("derive from listings agrees with a full scan");
    }
}

/// Copy the tree at `src` over `dst` (merging directories), exactly.
fn copy_over(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).expect("mkdir");
    agentbox_store::fsops::copy::copy_dir(src, dst, &Default::default()).expect("copy");
}
