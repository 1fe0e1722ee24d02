//! A minimal root filesystem made from the host's own binaries and their libraries, for
//! tests that need an image (no image can be downloaded).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Binaries copied into the rootfs (with every library `ldd` lists).
pub const BINARIES: &[&str] = &[
    "/bin/sh",
    "/bin/cat",
    "/bin/ls",
    "/bin/echo",
    "/bin/mkdir",
    "/bin/rm",
    "/bin/sleep",
    "/bin/true",
    "/usr/bin/env",
    "/usr/bin/id",
];

fn libraries(bin: &Path) -> Vec<PathBuf> {
    let out = Command::new("ldd").arg(bin).output().expect("run ldd");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            l.split_whitespace()
                .find(|w| w.starts_with('/'))
                .map(PathBuf::from)
        })
        .collect()
}

fn copy_in(root: &Path, host: &Path) {
    let real = std::fs::canonicalize(host).expect("canonicalize");
    let dst = root.join(host.strip_prefix("/").expect("absolute"));
    std::fs::create_dir_all(dst.parent().expect("parent")).expect("mkdir");
    if !dst.exists() {
        std::fs::copy(&real, &dst).expect("copy binary");
    }
}

/// Build the rootfs in `root`: the binaries, their libraries, `/etc/os-release` naming it,
/// and the usual empty directories.
pub fn build(root: &Path) {
    for bin in BINARIES {
        let bin = Path::new(bin);
        if !bin.exists() {
            continue;
        }
        copy_in(root, bin);
        for lib in libraries(bin) {
            copy_in(root, &lib);
        }
    }
    for d in [
        "etc",
        "proc",
        "sys",
        "dev",
        "tmp",
        "run",
        "root",
        "workspace",
    ] {
        std::fs::create_dir_all(root.join(d)).expect("mkdir");
    }
    std::fs::write(root.join("etc/os-release"), "ID=agentbox-test-rootfs\n").expect("write");
}

/// Add to the rootfs at `root` more of the host's software: each binary of `binaries`
/// with its libraries, and each directory of `trees` whole (a language's standard library,
/// `git`'s helpers). A path the host lacks is an error: the test needs it.
pub fn add_host_tools(root: &Path, binaries: &[&str], trees: &[&str]) {
    for bin in binaries {
        let bin = Path::new(bin);
        assert!(bin.exists(), "the host has no {}", bin.display());
        copy_in(root, bin);
        for lib in libraries(bin) {
            copy_in(root, &lib);
        }
    }
    for tree in trees {
        let dst = root.join(tree.trim_start_matches('/'));
        std::fs::create_dir_all(dst.parent().expect("parent")).expect("mkdir");
        let ok = Command::new("cp")
            .args(["-a", "--no-preserve=ownership"])
            .arg(tree)
            .arg(&dst)
            .status()
            .expect("cp")
            .success();
        assert!(ok, "copying {tree} failed");
    }
}

/// A rootfs of the host's own tools as [`build`] makes it, plus [`add_host_tools`], packed
/// as a tar at `tar` (`work` holds the tree meanwhile).
pub fn build_tar_with(work: &Path, tar: &Path, binaries: &[&str], trees: &[&str]) {
    let root = work.join("rootfs");
    build(&root);
    add_host_tools(&root, binaries, trees);
    pack(&root, tar);
}

/// Build the rootfs and pack it as a tar at `tar`.
pub fn build_tar(work: &Path, tar: &Path) {
    let root = work.join("rootfs");
    build(&root);
    pack(&root, tar);
}

fn pack(root: &Path, tar: &Path) {
    let ok = Command::new("tar")
        .arg("-C")
        .arg(root)
        .arg("-cf")
        .arg(tar)
        .arg(".")
        .status()
        .expect("tar")
        .success();
    assert!(ok, "tar failed");
}
