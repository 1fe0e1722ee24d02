//! The change watcher on real directories with real inotify (and, as root, a real overlayfs
//! mount). inotify queues an event inside the syscall that caused it, so after an operation
//! returns its events are already readable: tests drain with a zero timeout and assert on
//! what was read, never on how long anything took.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agentbox_provider_local::watch::{fingerprint, IgnoreSet, Seen, WatchError, Watcher};
use agentbox_testkit::tier;

mod events;
mod fingerprint;
mod limit;
mod overlay;
mod recording;

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
