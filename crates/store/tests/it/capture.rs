//! A box's commit right after its change check (what every auto-capture does) takes the
//! check's scan of the upper directory instead of walking it again, on every backend (tier
//! 2). What changed after that scan is never lost: the next commit takes it. A scan made
//! before another commit replaced the recorded marks is never taken.

use std::path::{Path, PathBuf};

use agentbox_store::{Source, Store};

use crate::common::{commit, fixtures, write, Fixture};

/// The paths node `b` changed over node `a` (`None`: the working tree).
fn changed_by(store: &Store, env: &str, a: &str, b: Option<&str>) -> Vec<String> {
    store
        .diff(env, a, b)
        .expect("diff")
        .into_iter()
        .map(|c| c.path.display().to_string())
        .collect()
}

/// Box `bx` made from a directory holding `workspace/NAME` = `content`: its upper directory.
fn new_box(fx: &Fixture, store: &Store, name: &str, content: &str) -> PathBuf {
    let src = fx.base.join("src");
    write(&src.join("workspace").join(name), content);
    store
        .create_env("bx", None, Source::Dir(src), "initial")
        .expect("create");
    store.box_layers("bx").expect("box layers").upper
}

/// The changes between `env`'s HEAD and its working tree.
fn uncommitted(store: &Store, env: &str) -> Vec<String> {
    changed_by(store, env, "HEAD", None)
}

#[test]
fn what_changes_after_the_change_check_is_taken_by_the_next_commit() {
    for fx in fixtures("what_changes_after_the_change_check_is_taken_by_the_next_commit") {
        let store = fx.store();
        let upper = new_box(&fx, &store, "edited", "v1");
        write(&upper.join("workspace/gone"), "made, then removed");
        let made = commit(&store, "bx", "made gone").to_string();

        write(&upper.join("workspace/edited"), "v2");
        write(&upper.join("workspace/early"), "before the check");
        let checked = store.changed_paths("bx").expect("check");
        let names: Vec<_> = checked.iter().map(|(p, _)| p.as_path()).collect();
        assert!(names.contains(&Path::new("workspace/early")), "{names:?}");
        // After the check's scan, before the commit: a new file, a rewrite in place, a
        // removal of a committed file.
        write(&upper.join("workspace/late"), "after the check");
        write(&upper.join("workspace/edited"), "v3");
        std::fs::remove_file(upper.join("workspace/gone")).expect("rm");
        let first = commit(&store, "bx", "after the check").to_string();
        // The commit took the tree as the check saw it (with the files' current data).
        let took = changed_by(&store, "bx", &made, Some(&first));
        assert!(took.contains(&"workspace/early".to_owned()), "{took:?}");
        assert!(took.contains(&"workspace/edited".to_owned()), "{took:?}");
        assert!(!took.contains(&"workspace/late".to_owned()), "{took:?}");
        // The next commit takes the rest, and nothing is left behind.
        let second = commit(&store, "bx", "the rest").to_string();
        let rest = changed_by(&store, "bx", &first, Some(&second));
        assert!(rest.contains(&"workspace/late".to_owned()), "{rest:?}");
        assert!(rest.contains(&"workspace/gone".to_owned()), "{rest:?}");
        assert_eq!(
            uncommitted(&store, "bx"),
            Vec::<String>::new(),
            "{:?}",
            fx.kind
        );
        let all = changed_by(&store, "bx", &made, Some(&second));
        for p in [
            "workspace/early",
            "workspace/edited",
            "workspace/late",
            "workspace/gone",
        ] {
            assert!(all.contains(&p.to_owned()), "{p} in {all:?}");
        }
    }
}

#[test]
fn a_check_made_before_another_commit_is_not_taken() {
    for fx in fixtures("a_check_made_before_another_commit_is_not_taken") {
        let store = fx.store();
        let upper = new_box(&fx, &store, "a", "a");
        write(&upper.join("workspace/one"), "1");
        store.changed_paths("bx").expect("check");
        // Another process (here: another thread, with a store of its own) commits meanwhile.
        let root = fx.base.join("store");
        let kind = fx.kind;
        let up = upper.clone();
        std::thread::spawn(move || {
            let other = Store::open_or_init(&root, Some(kind)).expect("open");
            write(&up.join("workspace/two"), "2");
            commit(&other, "bx", "elsewhere");
        })
        .join()
        .expect("the other commit");
        write(&upper.join("workspace/three"), "3");
        commit(&store, "bx", "here");
        // Made from the old check, the commit would have missed `three`.
        assert_eq!(
            uncommitted(&store, "bx"),
            Vec::<String>::new(),
            "{:?}",
            fx.kind
        );
    }
}

/// A tiny deterministic generator: the same sequence of edits on every run.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n
    }
}

/// One random edit of the upper directory `upper`, as a box makes them through its overlay
/// (whiteouts included); returns the paths an inotify watcher reports events for, keeping
/// only the top one of a removed or moved directory (the check must infer the rest).
fn random_edit(upper: &Path, rng: &mut Lcg, round: usize) -> Vec<PathBuf> {
    use std::os::unix::fs::symlink;
    let dirs = ["workspace", "workspace/a", "workspace/a/b", "workspace/c"];
    let dir = PathBuf::from(dirs[rng.next(dirs.len())]);
    let name = dir.join(format!("f{}", rng.next(6)));
    let abs = |p: &Path| upper.join(p);
    let exists = |p: &Path| std::fs::symlink_metadata(abs(p)).is_ok();
    let parent_ok = |p: &Path| {
        p.parent()
            .map(|d| std::fs::symlink_metadata(abs(d)).is_ok_and(|m| m.is_dir()))
            .unwrap_or(true)
    };
    match rng.next(9) {
        // Write (create or rewrite) a file.
        0 | 1 => {
            let blocked = name
                .ancestors()
                .skip(1)
                .any(|a| std::fs::symlink_metadata(abs(a)).is_ok_and(|m| !m.is_dir()));
            if blocked || abs(&name).is_dir() {
                return vec![];
            }
            // Over a whiteout or a symlink: the new file replaces it.
            if std::fs::symlink_metadata(abs(&name)).is_ok_and(|m| !m.is_file()) {
                std::fs::remove_file(abs(&name)).expect("rm");
            }
            write(&abs(&name), &format!("round {round}"));
            // `write` makes missing directories: each is an event in its parent.
            name.ancestors()
                .filter(|a| !a.as_os_str().is_empty())
                .map(Path::to_owned)
                .collect()
        }
        // Remove whatever is there (a tree at once).
        2 => {
            let target = if rng.next(2) == 0 { name } else { dir };
            match std::fs::symlink_metadata(abs(&target)) {
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(abs(&target)).expect("rm -r"),
                Ok(_) => std::fs::remove_file(abs(&target)).expect("rm"),
                Err(_) => return vec![],
            }
            vec![target]
        }
        // Rename a file or a directory to another name.
        3 => {
            let from = if rng.next(2) == 0 {
                name.clone()
            } else {
                dir.clone()
            };
            let to = PathBuf::from(dirs[rng.next(dirs.len())]).join(format!("m{}", rng.next(4)));
            if !exists(&from) || !parent_ok(&to) || to.starts_with(&from) || exists(&to) {
                return vec![];
            }
            std::fs::rename(abs(&from), abs(&to)).expect("rename");
            vec![from, to]
        }
        // A second name of a file.
        4 => {
            let to = dir.join(format!("l{}", rng.next(3)));
            if !abs(&name).is_file() || exists(&to) || !parent_ok(&to) {
                return vec![];
            }
            std::fs::hard_link(abs(&name), abs(&to)).expect("link");
            vec![to]
        }
        // A whiteout where a lower file may be.
        5 => {
            if exists(&name) || !parent_ok(&name) {
                return vec![];
            }
            rustix::fs::mknodat(
                rustix::fs::CWD,
                abs(&name),
                rustix::fs::FileType::CharacterDevice,
                rustix::fs::Mode::from_raw_mode(0o000),
                0,
            )
            .expect("mknod whiteout");
            vec![name]
        }
        // A directory replaced by a symlink to somewhere outside the box.
        6 => {
            if !abs(&dir).is_dir() || dir == Path::new("workspace") {
                return vec![];
            }
            std::fs::remove_dir_all(abs(&dir)).expect("rm -r");
            symlink("/etc", abs(&dir)).expect("symlink");
            // The old entries below it: a stale watcher path a check must not follow.
            vec![dir.clone(), dir.join("passwd"), dir.join("f0")]
        }
        // A file's metadata only.
        7 => {
            if !abs(&name).is_file() {
                return vec![];
            }
            let p = std::fs::metadata(abs(&name)).expect("stat").permissions();
            let mut p2 = p.clone();
            std::os::unix::fs::PermissionsExt::set_mode(&mut p2, 0o600 + round as u32 % 2);
            std::fs::set_permissions(abs(&name), p2).expect("chmod");
            vec![name]
        }
        // A new directory with contents made before any watch could be on it.
        _ => {
            let d = dir.join(format!("d{}", rng.next(3)));
            if exists(&d) || !parent_ok(&d) {
                return vec![];
            }
            write(&abs(&d.join("x/y")), "deep");
            write(&abs(&d.join("z")), "z");
            vec![d]
        }
    }
}

fn sorted(mut v: Vec<(PathBuf, bool)>) -> Vec<(PathBuf, bool)> {
    v.sort();
    v.dedup();
    v
}

#[test]
fn a_hinted_check_and_its_commit_see_what_a_whole_scan_sees() {
    for fx in fixtures("a_hinted_check_and_its_commit_see_what_a_whole_scan_sees") {
        let store = fx.store();
        let upper = new_box(&fx, &store, "seed", "s");
        for d in ["workspace/a/b", "workspace/c"] {
            write(&upper.join(d).join("f0"), "first");
        }
        commit(&store, "bx", "first");
        let mut rng = Lcg(7);
        let mut hinted_rounds = 0;
        for round in 0..80 {
            let mut touched = Vec::new();
            for _ in 0..1 + rng.next(4) {
                touched.extend(random_edit(&upper, &mut rng, round));
            }
            let version = store
                .marks_version("bx")
                .expect("version")
                .expect("a box keeps marks");
            let whole = sorted(store.changed_paths("bx").expect("whole check"));
            let hint = agentbox_store::ChangeHint {
                since: version,
                paths: touched.clone(),
            };
            let hinted = sorted(
                store
                    .changed_paths_hinted("bx", Some(&hint))
                    .expect("hinted check"),
            );
            assert_eq!(
                hinted, whole,
                "{:?} round {round}: hinted by {touched:?}",
                fx.kind
            );
            if hinted.is_empty() {
                continue;
            }
            hinted_rounds += 1;
            // The commit takes the hinted check's look.
            commit(&store, "bx", &format!("round {round}"));
            assert_eq!(
                uncommitted(&store, "bx"),
                Vec::<String>::new(),
                "{:?} round {round}: left after a hinted commit, hinted by {touched:?}",
                fx.kind
            );
            // And the marks it recorded are those a whole scan finds.
            assert_eq!(
                store.changed_paths("bx").expect("check"),
                vec![],
                "{:?} round {round}",
                fx.kind
            );
        }
        assert!(
            hinted_rounds > 40,
            "only {hinted_rounds} rounds changed anything"
        );
        // A stale hint (marks of an earlier version) is not used: the check sees all.
        let stale = store.marks_version("bx").expect("v").expect("marks");
        write(&upper.join("workspace/after"), "x");
        commit(&store, "bx", "moves the marks on");
        write(&upper.join("workspace/unhinted"), "y");
        let hint = agentbox_store::ChangeHint {
            since: stale,
            paths: vec![],
        };
        let seen = store
            .changed_paths_hinted("bx", Some(&hint))
            .expect("check");
        assert!(
            seen.iter()
                .any(|(p, _)| p == Path::new("workspace/unhinted")),
            "{seen:?}"
        );
    }
}

/// A directory removed with its tree and made again, when the filesystem hands the freed
/// inode number to the new one (ext4 does at once): a hint naming only the directory
/// (all a watcher may report of a tree removed at once) still finds the old entries gone
/// and the new ones new. The inode number alone cannot tell the two directories apart.
#[test]
fn a_directory_made_again_under_its_old_inode_number_is_looked_at_whole() {
    use std::os::unix::fs::MetadataExt;
    let (mut ran, mut reused_somewhere) = (false, false);
    for fx in fixtures("a_directory_made_again_under_its_old_inode_number_is_looked_at_whole") {
        ran = true;
        let store = fx.store();
        let upper = new_box(&fx, &store, "seed", "s");
        let mut reused = false;
        for attempt in 0..20 {
            let dir = upper.join("workspace/r");
            write(&dir.join("old/deep"), "old");
            write(&dir.join("kept"), "old");
            commit(&store, "bx", &format!("tree {attempt}"));
            let ino = std::fs::metadata(&dir).expect("stat").ino();
            let version = store.marks_version("bx").expect("version").expect("marks");
            std::fs::remove_dir_all(&dir).expect("rm -r");
            write(&dir.join("kept"), "new");
            write(&dir.join("fresh/deep"), "new");
            reused |= std::fs::metadata(&dir).expect("stat").ino() == ino;
            let whole = sorted(store.changed_paths("bx").expect("whole check"));
            let hint = agentbox_store::ChangeHint {
                since: version,
                paths: vec![PathBuf::from("workspace/r")],
            };
            let hinted = sorted(
                store
                    .changed_paths_hinted("bx", Some(&hint))
                    .expect("hinted check"),
            );
            assert!(
                whole.contains(&(PathBuf::from("workspace/r/old"), true)),
                "{:?}: {whole:?}",
                fx.kind
            );
            assert_eq!(hinted, whole, "{:?} attempt {attempt}", fx.kind);
            commit(&store, "bx", &format!("again {attempt}"));
            assert_eq!(
                uncommitted(&store, "bx"),
                Vec::<String>::new(),
                "{:?}",
                fx.kind
            );
            std::fs::remove_dir_all(&dir).expect("rm -r");
            commit(&store, "bx", &format!("gone {attempt}"));
            if reused {
                break;
            }
        }
        eprintln!("{:?}: inode number reused: {reused}", fx.kind);
        reused_somewhere |= reused;
    }
    // The case this test is about must have happened (on the ext4 of the layers fixture).
    if ran {
        assert!(
            reused_somewhere,
            "no filesystem of the fixtures reused an inode number"
        );
    }
}

/// What `npm install` does with esbuild: a file committed in one directory, then linked
/// from another (its link count moves both names' ctime), and only the new name hinted.
/// The other name's directories were not in the hint: the hinted commit must still write
/// them into the layer (it once failed with "create …/bin/esbuild: No such file", and
/// every later capture of the box failed the same way).
#[test]
fn a_hinted_commit_takes_the_directories_of_a_linked_files_other_name() {
    for fx in fixtures("a_hinted_commit_takes_the_directories_of_a_linked_files_other_name") {
        let store = fx.store();
        let upper = new_box(&fx, &store, "seed", "s");
        let first = upper.join("workspace/node_modules/@esbuild/linux-x64/bin/esbuild");
        write(&first, "binary");
        commit(&store, "bx", "installed");
        let second = upper.join("workspace/node_modules/esbuild/bin/esbuild");
        std::fs::create_dir_all(second.parent().expect("parent")).expect("mkdir");
        std::fs::hard_link(&first, &second).expect("link");
        let version = store.marks_version("bx").expect("version").expect("marks");
        let hint = agentbox_store::ChangeHint {
            since: version,
            paths: vec![PathBuf::from("workspace/node_modules/esbuild/bin/esbuild")],
        };
        let hinted = store
            .changed_paths_hinted("bx", Some(&hint))
            .expect("hinted check");
        assert!(
            hinted
                .iter()
                .any(|(p, _)| p.ends_with("linux-x64/bin/esbuild")),
            "{:?}: the other name is not seen: {hinted:?}",
            fx.kind
        );
        commit(&store, "bx", "linked");
        assert_eq!(
            uncommitted(&store, "bx"),
            Vec::<String>::new(),
            "{:?}",
            fx.kind
        );
    }
}

#[test]
fn a_hinted_check_of_a_tree_made_again_sees_what_a_whole_check_sees() {
    for fx in fixtures("a_hinted_check_of_a_tree_made_again_sees_what_a_whole_check_sees") {
        let store = fx.store();
        let upper = new_box(&fx, &store, "seed", "s");
        let ws = upper.join("workspace");
        let old = [
            "v/lib/a/b/c.py",
            "v/lib/a/d.py",
            "v/lib/gone/x.py",
            "v/bin/run",
        ];
        for p in old {
            write(&ws.join(p), "old");
        }
        write(&ws.join("shared.txt"), "linked");
        commit(&store, "bx", "first install");
        // `rm -rf v && python3 -m venv v && pip install …`: the tree goes and comes back,
        // deeper, with a file linked to one outside it.
        std::fs::remove_dir_all(ws.join("v")).expect("rm -rf v");
        let new = [
            "v/lib/a/b/c.py",
            "v/lib/a/b/deeper/e.py",
            "v/lib/a/d.py",
            "v/lib/new/f.py",
            "v/bin/run",
        ];
        for p in new {
            write(&ws.join(p), "new");
        }
        std::fs::hard_link(ws.join("shared.txt"), ws.join("v/lib/new/shared.txt")).expect("link");
        let version = store.marks_version("bx").expect("version").expect("marks");
        let mut paths: Vec<PathBuf> = old
            .iter()
            .chain(new.iter())
            .map(|p| PathBuf::from("workspace").join(p))
            .collect();
        paths.push(PathBuf::from("workspace/v/lib/new/shared.txt"));
        let hint = agentbox_store::ChangeHint {
            since: version,
            paths,
        };
        let sorted = |mut v: Vec<(PathBuf, bool)>| {
            v.sort();
            v
        };
        let hinted = sorted(
            store
                .changed_paths_hinted("bx", Some(&hint))
                .expect("hinted check"),
        );
        let whole = sorted(store.changed_paths_hinted("bx", None).expect("whole check"));
        assert_eq!(hinted, whole, "{:?}", fx.kind);
        assert!(
            hinted.iter().any(|(p, _)| p.ends_with("lib/gone/x.py")),
            "{:?}: the file gone with the old tree is not seen: {hinted:?}",
            fx.kind
        );
        assert!(
            hinted
                .iter()
                .any(|(p, _)| p.ends_with("workspace/shared.txt")),
            "{:?}: the linked file's other name is not seen: {hinted:?}",
            fx.kind
        );
        commit(&store, "bx", "second install");
        assert_eq!(
            uncommitted(&store, "bx"),
            Vec::<String>::new(),
            "{:?}",
            fx.kind
        );
    }
}
