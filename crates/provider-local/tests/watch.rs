//! The change watcher on real directories with real inotify (and, as root, a real overlayfs
//! mount). inotify queues an event inside the syscall that caused it, so after an operation
//! returns its events are already readable: tests drain with a zero timeout and assert on
//! what was read, never on how long anything took.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use agentbox_provider_local::watch::{fingerprint, IgnoreSet, Seen, WatchError, Watcher};
use agentbox_testkit::tier;

/// Long enough never to matter: events are queued before the operation returns, so a poll
/// expecting them returns at once.
const EXPECTING: Duration = Duration::from_secs(30);

fn tempdir() -> tempfile::TempDir {
    let base = std::env::var_os("AGENTBOX_TEST_TMP")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    tempfile::Builder::new()
        .prefix("agentbox-watch-")
        .tempdir_in(base)
        .expect("create a temporary directory")
}

fn patterns(p: &[&str]) -> IgnoreSet {
    IgnoreSet::new(&p.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
}

/// Everything queued so far, merged (polls until one reads nothing).
fn drain(w: &mut Watcher) -> Seen {
    let mut total = Seen::default();
    loop {
        let seen = w.poll(Duration::ZERO).expect("poll");
        if !seen.any() {
            return total;
        }
        total.changed += seen.changed;
        total.overflowed |= seen.overflowed;
    }
}

/// Waits for the events of an operation that just returned, then drains the rest.
fn changes_after(w: &mut Watcher) -> Seen {
    let first = w.poll(EXPECTING).expect("poll");
    let rest = drain(w);
    Seen {
        changed: first.changed + rest.changed,
        overflowed: first.overflowed || rest.overflowed,
    }
}

fn write(path: &Path, data: &str) {
    if let Some(parent) = path.parent() {
        fs_err::create_dir_all(parent).expect("mkdir -p");
    }
    fs_err::write(path, data).expect("write");
}

fn append(path: &Path, data: &str) {
    let mut f = fs_err::OpenOptions::new()
        .append(true)
        .open(path)
        .expect("open for append");
    f.write_all(data.as_bytes()).expect("append");
}

/// A named operation on a tree.
type Op<'a> = (&'static str, Box<dyn Fn() + 'a>);

#[test]
fn every_kind_of_change_is_seen() {
    let t = tempdir();
    let root = t.path();
    write(&root.join("src/a.txt"), "a\n");
    let mut w = Watcher::new(root, IgnoreSet::none()).expect("watch");
    assert_eq!(w.root(), root);
    assert_eq!(w.watch_count(), 2);
    assert_eq!(drain(&mut w), Seen::default(), "nothing happened yet");

    let ops: Vec<Op<'_>> = vec![
        ("create", Box::new(|| write(&root.join("src/b.txt"), "b"))),
        (
            "append",
            Box::new(|| append(&root.join("src/a.txt"), "more")),
        ),
        (
            "chmod",
            Box::new(|| {
                fs_err::set_permissions(
                    root.join("src/a.txt"),
                    std::fs::Permissions::from_mode(0o600),
                )
                .expect("chmod")
            }),
        ),
        (
            "rename",
            Box::new(|| {
                fs_err::rename(root.join("src/b.txt"), root.join("src/c.txt")).expect("rename")
            }),
        ),
        (
            "symlink",
            Box::new(|| {
                std::os::unix::fs::symlink("a.txt", root.join("src/link")).expect("symlink")
            }),
        ),
        (
            "delete",
            Box::new(|| fs_err::remove_file(root.join("src/c.txt")).expect("rm")),
        ),
        (
            "chmod root",
            Box::new(|| {
                fs_err::set_permissions(root, std::fs::Permissions::from_mode(0o750))
                    .expect("chmod")
            }),
        ),
        (
            "rmdir",
            Box::new(|| {
                fs_err::create_dir(root.join("gone")).expect("mkdir");
                fs_err::remove_dir(root.join("gone")).expect("rmdir")
            }),
        ),
    ];
    for (name, op) in ops {
        op();
        let seen = changes_after(&mut w);
        assert!(seen.changed > 0, "{name}: no change seen");
        assert!(!seen.overflowed, "{name}");
    }
    assert_eq!(w.watch_count(), 2, "the removed directory lost its watch");
}

#[test]
fn ignored_paths_produce_no_changes() {
    let t = tempdir();
    let root = t.path();
    for dir in [
        "tmp",
        "var/log",
        "home/dev/.cache",
        "work/node_modules/.cache",
        "src",
    ] {
        fs_err::create_dir_all(root.join(dir)).expect("mkdir");
    }
    let mut ignore = IgnoreSet::default_patterns();
    ignore.push("*.log".to_owned());
    let mut w = Watcher::new(root, IgnoreSet::new(&ignore)).expect("watch");
    // root, var, home, home/dev, work, work/node_modules, src: the ignored ones are unwatched.
    assert_eq!(w.watch_count(), 7);

    write(&root.join("tmp/x"), "x");
    fs_err::create_dir_all(root.join("tmp/a/b/c")).expect("mkdir");
    write(&root.join("tmp/a/b/c/f"), "f");
    append(&root.join("tmp/x"), "more");
    write(&root.join("var/log/syslog"), "log line");
    write(&root.join("home/dev/.cache/pip/wheel"), "w");
    write(&root.join("work/node_modules/.cache/babel/1.json"), "{}");
    write(&root.join("src/build.log"), "log");
    append(&root.join("src/build.log"), "more log");
    write(&root.join("src/pkg/__pycache__/m.cpython-312.pyc"), "pyc");
    write(&root.join("src/.pytest_cache/v/cache/lastfailed"), "{}");
    fs_err::rename(root.join("tmp/x"), root.join("tmp/y")).expect("rename");
    fs_err::remove_file(root.join("tmp/y")).expect("rm");

    let seen = drain(&mut w);
    // `src/pkg` is not ignored: its creation is the only change.
    assert_eq!(seen.changed, 1, "only src/pkg: {seen:?}");
    assert_eq!(w.watch_count(), 8, "src/pkg watched, its __pycache__ not");
    write(&root.join("src/pkg/__pycache__/n.pyc"), "pyc");
    assert_eq!(drain(&mut w), Seen::default());

    write(&root.join("src/main.rs"), "fn main() {}");
    assert!(
        changes_after(&mut w).changed > 0,
        "a real change still counts"
    );
}

#[test]
fn directories_created_after_start_are_watched() {
    let t = tempdir();
    let root = t.path();
    let mut w = Watcher::new(root, IgnoreSet::none()).expect("watch");
    assert_eq!(w.watch_count(), 1);

    fs_err::create_dir_all(root.join("a/b/c/d")).expect("mkdir -p");
    write(&root.join("a/b/c/d/f"), "f");
    let seen = changes_after(&mut w);
    // a, b, c, d and f, each counted at least once (by event or by the new directory's walk).
    assert!(seen.changed >= 5, "{seen:?}");
    assert_eq!(w.watch_count(), 5);

    // The deepest directory has its own watch now.
    append(&root.join("a/b/c/d/f"), "more");
    assert!(changes_after(&mut w).changed > 0);
    write(&root.join("a/b/c/d/e/g"), "g");
    assert!(changes_after(&mut w).changed > 0);
    assert_eq!(w.watch_count(), 6);
    append(&root.join("a/b/c/d/e/g"), "more");
    assert!(changes_after(&mut w).changed > 0);
}

#[test]
fn moved_directories_are_watched_under_their_new_path() {
    let t = tempdir();
    let root = t.path();
    write(&root.join("proj/sub/f"), "f");
    fs_err::create_dir_all(root.join("tmp")).expect("mkdir");
    let mut w = Watcher::new(root, patterns(&["tmp", "moved/skip"])).expect("watch");
    assert_eq!(w.watch_count(), 3);

    // Inside the tree: the subtree keeps being watched, under the new path.
    fs_err::create_dir(root.join("proj/skip")).expect("mkdir");
    fs_err::rename(root.join("proj"), root.join("moved")).expect("rename");
    assert!(changes_after(&mut w).changed > 0);
    assert_eq!(
        w.watch_count(),
        3,
        "moved, moved/sub; moved/skip is ignored now"
    );
    append(&root.join("moved/sub/f"), "more");
    assert!(changes_after(&mut w).changed > 0);
    write(&root.join("moved/skip/x"), "x");
    assert_eq!(
        drain(&mut w),
        Seen::default(),
        "the new path decides what is ignored"
    );

    // Into an ignored directory: its watches go.
    fs_err::rename(root.join("moved"), root.join("tmp/moved")).expect("rename");
    assert!(changes_after(&mut w).changed > 0, "the directory left");
    assert_eq!(w.watch_count(), 1);
    append(&root.join("tmp/moved/sub/f"), "more");
    assert_eq!(drain(&mut w), Seen::default());

    // Out of the tree entirely, then back in.
    let outside = tempdir();
    write(&root.join("d/e/f"), "f");
    assert!(changes_after(&mut w).changed > 0);
    assert_eq!(w.watch_count(), 3);
    fs_err::rename(root.join("d"), outside.path().join("d")).expect("rename");
    assert!(changes_after(&mut w).changed > 0);
    assert_eq!(w.watch_count(), 1);
    append(&outside.path().join("d/e/f"), "more");
    assert_eq!(drain(&mut w), Seen::default(), "changes outside the tree");
    fs_err::rename(outside.path().join("d"), root.join("back")).expect("rename");
    let seen = changes_after(&mut w);
    assert!(seen.changed >= 3, "back, back/e, back/e/f: {seen:?}");
    assert_eq!(w.watch_count(), 3);
    append(&root.join("back/e/f"), "more");
    assert!(changes_after(&mut w).changed > 0);
}

#[test]
fn queue_overflow_is_reported_and_watches_still_work() {
    let t = tempdir();
    let root = t.path();
    fs_err::create_dir(root.join("many")).expect("mkdir");
    let mut w = Watcher::new(root, IgnoreSet::none()).expect("watch");
    let limit: usize = fs_err::read_to_string("/proc/sys/fs/inotify/max_queued_events")
        .map(|s| s.trim().parse().expect("a number"))
        .unwrap_or(16384);

    // Writes alternating between two files: each raises a MODIFY that the kernel cannot
    // merge with the previous event (which names the other file). None is read until the
    // queue overflowed.
    write(&root.join("many/a"), "a");
    write(&root.join("many/b"), "b");
    let open = |name: &str| {
        fs_err::OpenOptions::new()
            .append(true)
            .open(root.join("many").join(name))
            .expect("open")
    };
    let mut files = [open("a"), open("b")];
    for i in 0..limit + 1000 {
        files[i % 2].write_all(b"x").expect("write");
    }
    // A directory made after the overflow is only found by the rescan.
    write(&root.join("late/f"), "f");
    let seen = changes_after(&mut w);
    assert!(seen.overflowed, "{seen:?}");
    assert!(seen.changed > 0);
    assert_eq!(w.watch_count(), 3, "root, many, late");

    append(&root.join("late/f"), "more");
    let seen = changes_after(&mut w);
    assert!(seen.changed > 0 && !seen.overflowed, "{seen:?}");
    write(&root.join("many/new"), "x");
    assert!(changes_after(&mut w).changed > 0);
    fs_err::create_dir_all(root.join("later/x")).expect("mkdir");
    write(&root.join("later/x/y"), "y");
    assert!(changes_after(&mut w).changed > 0);
    append(&root.join("later/x/y"), "more");
    assert!(changes_after(&mut w).changed > 0);
}

#[test]
fn five_thousand_directories_are_watched() {
    let t = tempdir();
    let root = t.path();
    for i in 0..50 {
        for j in 0..100 {
            fs_err::create_dir_all(root.join(format!("d{i}/e{j}"))).expect("mkdir");
        }
    }
    write(&root.join("d49/e99/f"), "f");
    let mut w = Watcher::new(root, IgnoreSet::none()).expect("watch");
    assert_eq!(w.watch_count(), 1 + 50 + 5000);
    append(&root.join("d49/e99/f"), "more");
    assert!(changes_after(&mut w).changed > 0);
    write(&root.join("d0/e0/new"), "n");
    assert!(changes_after(&mut w).changed > 0);
}

#[test]
fn setup_tolerates_a_tree_changing_meanwhile() {
    let t = tempdir();
    let root = t.path().to_owned();
    for i in 0..200 {
        fs_err::create_dir_all(root.join(format!("d{i}/x/y"))).expect("mkdir");
    }
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let churn = s.spawn(|| {
            let mut rounds = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || rounds < 3 {
                for i in 0..200 {
                    let _ = fs_err::remove_dir_all(root.join(format!("d{i}")));
                    let _ = fs_err::create_dir_all(root.join(format!("d{i}/x/y")));
                }
                rounds += 1;
            }
        });
        for _ in 0..5 {
            let mut w = Watcher::new(&root, IgnoreSet::none()).expect("watch a live tree");
            let _ = w.poll(Duration::ZERO).expect("poll a live tree");
            fingerprint(&root, &IgnoreSet::none()).expect("fingerprint a live tree");
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        churn.join().expect("churn thread");
    });
    // Once the tree is still, every directory is watched.
    let w = Watcher::new(&root, IgnoreSet::none()).expect("watch");
    assert_eq!(w.watch_count(), 1 + 200 * 3);
}

#[test]
fn a_missing_root_is_an_error_naming_it() {
    let t = tempdir();
    let missing = t.path().join("missing");
    let err = Watcher::new(&missing, IgnoreSet::none()).expect_err("no such root");
    assert_eq!(err.path(), missing);
    assert!(err.to_string().contains("missing"), "{err}");
    let err = fingerprint(&missing, &IgnoreSet::none()).expect_err("no such root");
    assert!(err.to_string().contains("missing"), "{err}");
}

#[test]
fn removing_the_root_is_reported() {
    let t = tempdir();
    let root = t.path().join("root");
    write(&root.join("f"), "f");
    let mut w = Watcher::new(&root, IgnoreSet::none()).expect("watch");
    fs_err::remove_dir_all(&root).expect("rm -r");
    let mut result = w.poll(EXPECTING);
    while let Ok(seen) = result {
        assert!(seen.any(), "the root's removal is reported as an error");
        result = w.poll(EXPECTING);
    }
    assert!(
        matches!(result, Err(WatchError::RootGone { .. })),
        "{result:?}"
    );
}

/// Fingerprints a tree before and after each operation.
struct Fp<'a> {
    root: &'a Path,
    ignore: IgnoreSet,
    last: u64,
}

impl Fp<'_> {
    fn now(&self) -> u64 {
        fingerprint(self.root, &self.ignore).expect("fingerprint")
    }
    fn changed(&mut self, what: &str) {
        let now = self.now();
        assert_ne!(now, self.last, "fingerprint unchanged after: {what}");
        self.last = now;
        assert_eq!(self.now(), now, "fingerprint unstable after: {what}");
    }
    fn unchanged(&mut self, what: &str) {
        assert_eq!(self.now(), self.last, "fingerprint changed after: {what}");
    }
}

#[test]
fn fingerprint_changes_on_each_kind_of_change_and_is_stable_otherwise() {
    let t = tempdir();
    let root = t.path();
    write(&root.join("src/a.txt"), "aaaa");
    write(&root.join("src/b.txt"), "bbbb");
    fs_err::create_dir_all(root.join("tmp")).expect("mkdir");
    let ignore = patterns(&["tmp", "*.log"]);
    let mut fp = Fp {
        root,
        last: fingerprint(root, &ignore).expect("fingerprint"),
        ignore,
    };
    fp.unchanged("nothing");
    // Reading does not count.
    fs_err::read(root.join("src/a.txt")).expect("read");
    fp.unchanged("a read");

    write(&root.join("src/c.txt"), "c");
    fp.changed("create");
    append(&root.join("src/c.txt"), "more");
    fp.changed("append");
    write(&root.join("src/a.txt"), "AAAA");
    fp.changed("rewrite keeping the size");
    fs_err::set_permissions(
        root.join("src/a.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .expect("chmod");
    fp.changed("chmod file");
    fs_err::set_permissions(root.join("src"), std::fs::Permissions::from_mode(0o700))
        .expect("chmod");
    fp.changed("chmod directory");
    fs_err::set_permissions(root, std::fs::Permissions::from_mode(0o750)).expect("chmod");
    fp.changed("chmod of the root");
    fs_err::rename(root.join("src/c.txt"), root.join("src/d.txt")).expect("rename");
    fp.changed("rename");
    fs_err::remove_file(root.join("src/d.txt")).expect("rm");
    fp.changed("delete");
    fs_err::create_dir(root.join("src/empty")).expect("mkdir");
    fp.changed("mkdir");
    fs_err::remove_dir(root.join("src/empty")).expect("rmdir");
    fp.changed("rmdir");
    std::os::unix::fs::symlink("a.txt", root.join("src/link")).expect("symlink");
    fp.changed("symlink");
    fs_err::hard_link(root.join("src/b.txt"), root.join("src/b2.txt")).expect("link");
    fp.changed("hard link");
    fs_err::remove_file(root.join("src/b2.txt")).expect("rm");
    fp.changed("unlink of a hard link (the other name's ctime)");
    fs_err::write(root.join("src/b.txt"), "bbbb").expect("write same");
    fp.changed("rewrite with identical content (mtime)");
    rustix::fs::setxattr(
        root.join("src/b.txt"),
        "user.agentbox.test",
        b"1",
        rustix::fs::XattrFlags::empty(),
    )
    .expect("setxattr");
    fp.changed("xattr");
    {
        let f = fs_err::File::create(root.join("src/a.txt")).expect("truncate");
        f.set_len(0).expect("truncate");
    }
    fp.changed("truncate");

    write(&root.join("tmp/x"), "x");
    fs_err::create_dir_all(root.join("tmp/d/e")).expect("mkdir");
    write(&root.join("src/out.log"), "log");
    append(&root.join("src/out.log"), "more");
    fp.unchanged("changes to ignored paths only");
}

// ------------------------------------------------------------------------------------------
// Through overlayfs (root)
// ------------------------------------------------------------------------------------------

/// An overlay mounted at `<tmp>/merged` over `<tmp>/lower`, with `<tmp>/upper`; unmounted on
/// drop.
struct Overlay {
    dir: tempfile::TempDir,
}

impl Overlay {
    fn mount(prepare_lower: impl FnOnce(&Path)) -> Overlay {
        let dir = tempdir();
        for d in ["lower", "upper", "work", "merged"] {
            fs_err::create_dir(dir.path().join(d)).expect("mkdir");
        }
        prepare_lower(&dir.path().join("lower"));
        let p = |d: &str| dir.path().join(d).display().to_string();
        let options = format!(
            "lowerdir={},upperdir={},workdir={}",
            p("lower"),
            p("upper"),
            p("work")
        );
        let options = std::ffi::CString::new(options).expect("no NUL");
        rustix::mount::mount(
            "overlay",
            dir.path().join("merged"),
            "overlay",
            rustix::mount::MountFlags::empty(),
            options.as_c_str(),
        )
        .expect("mount overlay");
        Overlay { dir }
    }
    fn merged(&self) -> PathBuf {
        self.dir.path().join("merged")
    }
    fn upper(&self) -> PathBuf {
        self.dir.path().join("upper")
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        let _ = rustix::mount::unmount(self.merged(), rustix::mount::UnmountFlags::DETACH);
    }
}

/// A named operation on the merged directory of an overlay.
type OverlayOp = (&'static str, Box<dyn Fn(&Path)>);

/// The operations through the merged directory; each must be seen on the upper directory.
fn overlay_ops() -> Vec<OverlayOp> {
    vec![
        (
            "(a) create a new file",
            Box::new(|m| write(&m.join("new"), "n")),
        ),
        (
            "(b) append to a file already in the upper directory",
            Box::new(|m| append(&m.join("new"), "more")),
        ),
        (
            "(c) modify a lower-only file (copy-up)",
            Box::new(|m| append(&m.join("lower-file"), "more")),
        ),
        (
            "(d) delete a lower file (whiteout)",
            Box::new(|m| fs_err::remove_file(m.join("lower-doomed")).expect("rm")),
        ),
        (
            "(d') delete an upper-only file",
            Box::new(|m| fs_err::remove_file(m.join("new")).expect("rm")),
        ),
        (
            "(e) mkdir and a file inside it",
            Box::new(|m| write(&m.join("newdir/inner/f"), "f")),
        ),
        (
            "(e') write in the directory made by (e)",
            Box::new(|m| append(&m.join("newdir/inner/f"), "more")),
        ),
        (
            "(f) chmod a lower-only file",
            Box::new(|m| {
                fs_err::set_permissions(
                    m.join("lower-mode"),
                    std::fs::Permissions::from_mode(0o600),
                )
                .expect("chmod")
            }),
        ),
        (
            "(f') chmod an upper file",
            Box::new(|m| {
                fs_err::set_permissions(
                    m.join("lower-mode"),
                    std::fs::Permissions::from_mode(0o640),
                )
                .expect("chmod")
            }),
        ),
        (
            "(g) new file in a lower-only directory (directory copy-up)",
            Box::new(|m| write(&m.join("lower-dir/sub/g"), "g")),
        ),
        (
            "(g') write in the copied-up directory",
            Box::new(|m| append(&m.join("lower-dir/sub/g"), "more")),
        ),
        (
            "(h) rename a lower file",
            Box::new(|m| {
                fs_err::rename(m.join("lower-renamed"), m.join("renamed")).expect("rename")
            }),
        ),
        (
            "(i) rmdir a lower directory and mkdir it again (opaque)",
            Box::new(|m| {
                fs_err::remove_dir_all(m.join("lower-opaque")).expect("rm -r");
                fs_err::create_dir(m.join("lower-opaque")).expect("mkdir");
            }),
        ),
        (
            "(j) open for writing, write nothing, close",
            // What a write through a shared mapping looks like to inotify: no MODIFY, only
            // the CLOSE_WRITE of the descriptor opened for writing.
            Box::new(|m| {
                fs_err::OpenOptions::new()
                    .write(true)
                    .open(m.join("renamed"))
                    .expect("open for writing");
            }),
        ),
        (
            "(k) grow a file with truncate",
            Box::new(|m| {
                fs_err::OpenOptions::new()
                    .write(true)
                    .open(m.join("renamed"))
                    .expect("open")
                    .set_len(4096)
                    .expect("grow");
            }),
        ),
    ]
}

fn lower_tree(lower: &Path) {
    write(&lower.join("lower-file"), "lower\n");
    write(&lower.join("lower-doomed"), "doomed\n");
    write(&lower.join("lower-mode"), "mode\n");
    write(&lower.join("lower-renamed"), "renamed\n");
    write(&lower.join("lower-dir/sub/existing"), "e\n");
    write(&lower.join("lower-opaque/x"), "x\n");
}

#[test]
fn overlay_writes_raise_events_on_the_upper_directory() {
    if !tier::require_root("overlay_writes_raise_events_on_the_upper_directory") {
        return;
    }
    let ov = Overlay::mount(lower_tree);
    let mut w = Watcher::new(&ov.upper(), IgnoreSet::none()).expect("watch upper");
    let mut missed = Vec::new();
    for (name, op) in overlay_ops() {
        op(&ov.merged());
        let seen = drain(&mut w);
        eprintln!("{name}: {seen:?}");
        if !seen.any() {
            missed.push(name);
        }
    }
    assert!(
        missed.is_empty(),
        "writes through overlayfs not seen on the upper directory: {missed:?}"
    );
}

#[test]
fn overlay_writes_change_the_upper_fingerprint() {
    if !tier::require_root("overlay_writes_change_the_upper_fingerprint") {
        return;
    }
    let ov = Overlay::mount(lower_tree);
    let mut fp = Fp {
        root: &ov.upper(),
        ignore: IgnoreSet::none(),
        last: 0,
    };
    fp.last = fp.now();
    for (name, op) in overlay_ops() {
        op(&ov.merged());
        if name.starts_with("(j)") {
            // Opening for writing changes nothing: only the watcher errs on the safe side.
            fp.unchanged(name);
        } else {
            fp.changed(name);
        }
    }
    // Reading through the overlay changes nothing in the upper directory.
    fs_err::read(ov.merged().join("lower-dir/sub/existing")).expect("read");
    fp.unchanged("a read of a lower file");
}

// ------------------------------------------------------------------------------------------
// The watch limit (in a user namespace with its own, tiny, limit)
// ------------------------------------------------------------------------------------------

const LIMIT_CHILD: &str = "AGENTBOX_WATCH_LIMIT_CHILD";

/// Runs `watch_limit_child` in a new user namespace whose inotify watch limit is 10.
#[test]
fn hitting_the_watch_limit_names_the_sysctl() {
    let test = "hitting_the_watch_limit_names_the_sysctl";
    let usable = Command::new("unshare")
        .args(["--user", "--map-root-user", "true"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !usable {
        tier::skip(test, "needs `unshare --user` (util-linux, user namespaces)");
        return;
    }
    let exe = std::env::current_exe().expect("test binary");
    let out = Command::new("unshare")
        .args(["--user", "--map-root-user"])
        .arg(exe)
        .args([
            "--exact",
            "watch_limit_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(LIMIT_CHILD, "1")
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("1 passed"),
        "child did not run:\n{stdout}\n{stderr}"
    );
}

#[test]
fn watch_limit_child() {
    if std::env::var_os(LIMIT_CHILD).is_none() {
        return; // runs only inside `hitting_the_watch_limit_names_the_sysctl`
    }
    fs_err::write("/proc/sys/user/max_inotify_watches", "10").expect("lower the limit");
    let t = tempdir();
    let root = t.path();
    for i in 0..20 {
        fs_err::create_dir(root.join(format!("d{i}"))).expect("mkdir");
    }
    let err = Watcher::new(root, IgnoreSet::none()).expect_err("over the limit");
    assert!(matches!(err, WatchError::WatchLimit { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("fs.inotify.max_user_watches"), "{message}");
    assert!(message.contains("backstop scan"), "{message}");

    // Within the limit at start, over it later: `poll` reports it.
    let t = tempdir();
    let root = t.path();
    let mut w = Watcher::new(root, IgnoreSet::none()).expect("one watch");
    for i in 0..20 {
        fs_err::create_dir(root.join(format!("d{i}"))).expect("mkdir");
    }
    let err = w.poll(EXPECTING).expect_err("over the limit");
    assert!(matches!(err, WatchError::WatchLimit { .. }), "{err:?}");
    // The fallback works without any watch.
    fingerprint(root, &IgnoreSet::none()).expect("fingerprint");
}

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
