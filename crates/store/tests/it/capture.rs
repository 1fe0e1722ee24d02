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
