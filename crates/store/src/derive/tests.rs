//! Unit tests of cleanup plans made from a scanned tree ([`Cleanup::plan`]).

use super::*;
use crate::fsops::Meta;

fn tree(entries: &[(&str, Kind, u64, u64)]) -> Tree {
    let mut t = Tree::default();
    let meta = |kind, ino, size| Meta {
        kind,
        perm: 0o644,
        uid: 0,
        gid: 0,
        size,
        mtime_sec: 0,
        mtime_nsec: 0,
        ctime_sec: 0,
        ctime_nsec: 0,
        btime: None,
        dev: 1,
        ino,
        nlink: 1,
        rdev: 0,
        target: None,
        xattrs: BTreeMap::new(),
    };
    t.entries.insert(
        PathBuf::new(),
        Entry {
            rel: PathBuf::new(),
            src: PathBuf::from("/r"),
            meta: meta(Kind::Dir, 1, 0),
        },
    );
    for (i, (rel, kind, size, ino)) in entries.iter().enumerate() {
        let ino = if *ino == 0 { 100 + i as u64 } else { *ino };
        t.entries.insert(
            PathBuf::from(rel),
            Entry {
                rel: PathBuf::from(rel),
                src: Path::new("/r").join(rel),
                meta: meta(*kind, ino, *size),
            },
        );
    }
    // Hard links: names sharing an inode.
    let mut count: BTreeMap<u64, u64> = BTreeMap::new();
    for e in t.entries.values() {
        *count.entry(e.meta.ino).or_default() += 1;
    }
    for e in t.entries.values_mut() {
        e.meta.nlink = count[&e.meta.ino];
    }
    t
}

fn rels(entries: &[Entry]) -> Vec<String> {
    entries
        .iter()
        .map(|e| e.rel.to_string_lossy().into_owned())
        .collect()
}

#[test]
fn plans_take_the_topmost_removals_and_only_regular_files_to_empty() {
    let t = tree(&[
        ("home", Kind::Dir, 0, 0),
        ("home/u", Kind::Dir, 0, 0),
        ("home/u/.bash_history", Kind::File, 10, 0),
        ("home/u/.zsh_history", Kind::Symlink, 0, 0),
        ("tmp", Kind::Dir, 0, 0),
        ("tmp/a", Kind::Dir, 0, 0),
        ("tmp/a/b.log", Kind::File, 5, 0),
        ("tmp/c", Kind::File, 7, 0),
        ("var", Kind::Dir, 0, 0),
        ("var/log", Kind::Dir, 0, 0),
        ("var/log/x.log", Kind::File, 3, 0),
        ("var/log/dir.log", Kind::Dir, 0, 0),
        ("var/log/empty.log", Kind::File, 0, 0),
    ]);
    let cleanup = Cleanup {
        delete: vec!["/tmp/**".into()],
        truncate: vec![
            "**/.bash_history".into(),
            "**/.zsh_history".into(),
            "*.log".into(),
        ],
    };
    let p = cleanup.plan(&t).expect("plan");
    assert_eq!(rels(&p.delete), ["tmp/a", "tmp/c"]);
    assert_eq!(
        rels(&p.truncate),
        ["home/u/.bash_history", "var/log/x.log"],
        "an empty file needs no edit"
    );
    assert_eq!(p.bytes, 5 + 7 + 10 + 3);
    let dirs: Vec<&Path> = p.dirs.keys().map(PathBuf::as_path).collect();
    assert_eq!(
        dirs,
        ["", "home", "home/u", "tmp", "var", "var/log"]
            .map(Path::new)
            .to_vec()
    );
    assert!(!p.is_empty());
}

#[test]
fn every_name_of_an_emptied_file_is_emptied_unless_removed() {
    let t = tree(&[
        ("a.log", Kind::File, 4, 7),
        ("keep", Kind::File, 4, 7),
        ("tmp", Kind::Dir, 0, 0),
        ("tmp/third", Kind::File, 4, 7),
    ]);
    let cleanup = Cleanup {
        delete: vec!["tmp/**".into()],
        truncate: vec!["*.log".into()],
    };
    let p = cleanup.plan(&t).expect("plan");
    assert_eq!(rels(&p.truncate), ["a.log", "keep"]);
    assert_eq!(rels(&p.delete), ["tmp/third"]);
    assert_eq!(p.bytes, 4, "one inode, counted once");
}

#[test]
fn patterns_naming_only_the_root_are_refused() {
    let cleanup = Cleanup {
        delete: vec!["/".into()],
        truncate: Vec::new(),
    };
    let err = cleanup.plan(&Tree::default()).expect_err("refused");
    assert!(matches!(err, Error::InvalidPattern { .. }), "{err}");
    assert!(Cleanup::default()
        .plan(&tree(&[("x", Kind::File, 1, 0)]))
        .expect("plan")
        .is_empty());
}
