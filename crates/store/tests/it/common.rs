//! Helpers shared by the test modules: a store per backend, small file helpers.

use std::path::{Path, PathBuf};

use agentbox_core::id::NodeId;
use agentbox_store::fsops::copy::{copy_dir, CopyOpts};
use agentbox_store::fsops::diff::compare_exact;
use agentbox_store::{BackendKind, CommitOpts, Store};
use agentbox_testkit::loopfs::LoopFs;
use agentbox_testkit::{tier, TempHome};

/// A place to run one backend: keeps its filesystem alive.
pub struct Fixture {
    pub kind: BackendKind,
    _home: Option<TempHome>,
    _fs: Option<LoopFs>,
    pub base: PathBuf,
}

impl Fixture {
    pub fn store(&self) -> Store {
        Store::open_or_init(&self.base.join("store"), Some(self.kind)).expect("open store")
    }
    pub fn dir(&self, name: &str) -> PathBuf {
        self.base.join("dirs").join(name)
    }
}

/// Fixtures for every backend, or none when the test cannot run here (skipped with a reason
/// locally, a failure under CI).
pub fn fixtures(test: &str) -> Vec<Fixture> {
    if !tier::require_root(test) {
        return Vec::new();
    }
    let home = TempHome::new();
    let layers = Fixture {
        kind: BackendKind::Layers,
        base: home.path().to_owned(),
        _home: Some(home),
        _fs: None,
    };
    let fs = LoopFs::btrfs(2 << 30).expect("loop btrfs");
    let btrfs = Fixture {
        kind: BackendKind::Btrfs,
        base: fs.path().to_owned(),
        _home: None,
        _fs: Some(fs),
    };
    vec![layers, btrfs]
}

/// Mount the layers `lowers` (top first) read-only with overlayfs at `at` (which must exist).
pub fn mount_overlay_ro<P: AsRef<Path>>(lowers: &[P], at: &Path) {
    let lowerdir = lowers
        .iter()
        .map(|l| l.as_ref().display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    rustix::mount::mount(
        "overlay",
        at,
        "overlay",
        rustix::mount::MountFlags::RDONLY,
        std::ffi::CString::new(format!("lowerdir={lowerdir}"))
            .expect("no NUL in a path")
            .as_c_str(),
    )
    .expect("mount overlay");
}

/// An overlay whiteout (a 0/0 character device) at `path`, its parents made as needed.
pub fn whiteout(path: &Path) {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).expect("mkdir");
    }
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::empty(),
        0,
    )
    .expect("whiteout");
}

pub fn write(path: &Path, content: &str) {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).expect("mkdir");
    }
    std::fs::write(path, content).expect("write");
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

pub fn commit(store: &Store, env: &str, msg: &str) -> NodeId {
    store
        .commit(
            env,
            CommitOpts {
                message: msg.into(),
                ..CommitOpts::default()
            },
        )
        .expect("commit")
        .id
}

/// Copy of the working tree, to compare a later checkout against.
pub fn snapshot_copy(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).expect("mkdir");
    copy_dir(src, dst, &CopyOpts::default()).expect("copy");
}

/// Export node `reference` of `env` as a zstd bundle of `kind` ("snapshot", "history") at
/// `to`.
pub fn export_zstd(store: &Store, env: &str, reference: &str, kind: &str, to: &Path) {
    agentbox_store::transfer::export(
        store,
        env,
        reference,
        kind.parse().expect("bundle kind"),
        "zstd".parse().expect("compression"),
        to,
    )
    .expect("export");
}

/// Import the bundle at `from` into `store` as environment `name` at `dir` (default options).
pub fn import_bundle(
    store: &Store,
    from: &Path,
    name: &str,
    dir: &Path,
) -> agentbox_store::transfer::ImportReport {
    agentbox_store::transfer::import(
        store,
        from.to_str().expect("a UTF-8 path"),
        name,
        dir,
        agentbox_store::transfer::ImportOptions::default(),
    )
    .expect("import")
}

pub fn assert_same(a: &Path, b: &Path, what: &str) {
    let diffs = compare_exact(a, b).expect("compare");
    assert!(
        diffs.is_empty(),
        "{what}: trees differ:\n{}",
        diffs.join("\n")
    );
}
