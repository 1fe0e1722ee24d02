//! The recording watcher's journal of paths with events.

use super::*;

/// A recording watcher journals every path with an event, ignored ones too (whose
/// directories it watches, though their events count as no change), forgets what a
/// commit took, keeps what it is told still differs, and says when events were lost.
#[test]
fn a_recording_watcher_journals_every_path_with_an_event() {
    let t = tempdir();
    let root = t.path();
    write(&root.join("src/a"), "a");
    write(&root.join("tmp/cache/x"), "x");
    let mut w = Watcher::recording(root, patterns(&["tmp"])).expect("watch");
    assert_eq!(
        w.watch_count(),
        4,
        "root, src, tmp, tmp/cache: ignored ones too"
    );
    let paths = |w: &mut Watcher| -> Vec<PathBuf> {
        let mut p: Vec<PathBuf> = w.journal().expect("recording").paths().cloned().collect();
        p.sort();
        p
    };

    append(&root.join("src/a"), "more");
    assert!(changes_after(&mut w).changed > 0);
    write(&root.join("tmp/cache/y"), "y");
    assert_eq!(
        changes_after(&mut w).changed,
        0,
        "ignored: no change counted"
    );
    assert_eq!(
        paths(&mut w),
        [PathBuf::from("src/a"), PathBuf::from("tmp/cache/y")]
    );

    // A commit took everything up to here; one path still differs from its marks.
    let j = w.journal().expect("recording");
    let upto = j.seq();
    j.forget_upto(upto);
    j.keep(PathBuf::from("tmp/cache/y"), upto);
    fs_err::rename(root.join("src"), root.join("moved")).expect("rename");
    changes_after(&mut w);
    assert_eq!(
        paths(&mut w),
        [
            PathBuf::from("moved"),
            PathBuf::from("src"),
            PathBuf::from("tmp/cache/y")
        ]
    );
    // Reading a file is no event.
    let j = w.journal().expect("recording");
    let upto = j.seq();
    j.forget_upto(upto);
    fs_err::read(root.join("moved/a")).expect("read");
    drain(&mut w);
    assert_eq!(paths(&mut w), Vec::<PathBuf>::new());
    assert!(!w.journal().expect("recording").lost());

    // An overflow: lost until a look at everything made after it.
    let limit: usize = fs_err::read_to_string("/proc/sys/fs/inotify/max_queued_events")
        .map(|s| s.trim().parse().expect("a number"))
        .unwrap_or(16384);
    let mut f = fs_err::OpenOptions::new()
        .append(true)
        .open(root.join("moved/a"))
        .expect("open");
    let mut g = fs_err::OpenOptions::new()
        .append(true)
        .open(root.join("tmp/cache/x"))
        .expect("open");
    let before = w.journal().expect("recording").seq();
    for i in 0..limit + 1000 {
        if i % 2 == 0 { &mut f } else { &mut g }
            .write_all(b"x")
            .expect("write");
    }
    assert!(changes_after(&mut w).overflowed);
    let j = w.journal().expect("recording");
    assert!(j.lost());
    j.recovered(before);
    assert!(
        j.lost(),
        "a look from before the overflow does not cover it"
    );
    let now = j.seq();
    j.recovered(now);
    assert!(!j.lost());
}
