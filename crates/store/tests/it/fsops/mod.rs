//! Fidelity of scanning, copying and diffing trees.
//!
//! This file holds the shared helpers and the random-tree copy property; the tests are
//! grouped into `copy`, `chains` (merged views of layer stacks) and `diff` (with races).

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use agentbox_store::fsops::{
    compare_exact, copy_dir, copy_tree, diff_trees, read_meta, read_meta_beneath, scan_chain,
    scan_tree, ChangeKind, CopyOpts, Kind,
};
use agentbox_testkit::tier::require_root;
use agentbox_testkit::tree_gen::{
    self, materialize, set_mode, set_mtime, write_and_set_times, write_sparse,
};
use agentbox_testkit::TempHome;
use proptest::prelude::*;
use rustix::fs::{FileType, Mode, CWD};

mod chains;
mod copy;
mod diff;

fn no_reflink() -> CopyOpts {
    CopyOpts {
        reflink: false,
        ..CopyOpts::default()
    }
}

/// Copy `src` to a fresh `dst` next to it and assert the copy is exact.
fn roundtrip(home: &TempHome, src: &Path, opts: &CopyOpts) -> PathBuf {
    let dst = home.path().join("dst");
    copy_dir(src, &dst, opts).expect("copy_dir");
    let diffs = compare_exact(src, &dst).expect("compare_exact");
    assert!(diffs.is_empty(), "copy differs: {diffs:#?}");
    dst
}

fn src_dir(home: &TempHome) -> PathBuf {
    let src = home.path().join("src");
    fs_err::create_dir(&src).expect("mkdir src");
    src
}

fn mknod(path: &Path, ft: FileType, dev: u64) {
    rustix::fs::mknodat(CWD, path, ft, Mode::from_raw_mode(0o644), dev).expect("mknod");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_trees_copy_exactly(spec in tree_gen::tree_spec(), reflink in any::<bool>()) {
        let home = TempHome::new();
        let src = home.path().join("src");
        materialize(&spec, &src);
        let dst = home.path().join("dst");
        let opts = CopyOpts { reflink, ..CopyOpts::default() };
        copy_dir(&src, &dst, &opts).expect("copy_dir");
        let diffs = compare_exact(&src, &dst).expect("compare_exact");
        prop_assert!(diffs.is_empty(), "copy differs: {:#?}", diffs);
        // Materialising and scanning are stable: a copy of the copy is exact too.
        let diffs = diff_trees(&scan_tree(&src).expect("scan"), &scan_tree(&dst).expect("scan"))
            .expect("diff");
        prop_assert!(diffs.is_empty(), "diff_trees reports changes on a copy: {:#?}", diffs);
    }
}
