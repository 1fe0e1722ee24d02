//! Through overlayfs (root): writes to the merged directory are seen on the upper one.

use super::*;

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
