//! Importing bundles an attacker may have crafted (a bundle can come from an untrusted box),
//! and their progress on stderr; what an interrupted operation leaves in the store is
//! `leftovers`. Every bundle is real: made by `agentbox export`, or crafted with the `tar`
//! and `zstd` crates.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::common::{code, stderr, write, Env};
use agentbox_testkit::tier::require_root;

/// A valid `security.capability` value (revision 2, effective, `cap_net_raw` permitted),
/// the kind `setcap cap_net_raw+ep` writes; the kernel refuses malformed ones.
const CAP_NET_RAW: [u8; 20] = [
    0x01, 0, 0, 0x02, // magic: revision 2, effective
    0x00, 0x20, 0, 0, // permitted[0]: bit 13
    0, 0, 0, 0, // inheritable[0]
    0, 0, 0, 0, // permitted[1]
    0, 0, 0, 0, // inheritable[1]
];

/// PAX extended-header data for `records`.
fn pax(records: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in records {
        let body = k.len() + v.len() + 3; // ' ', '=', '\n'
        let mut len = body + 1;
        while len != body + len.to_string().len() {
            len = body + len.to_string().len();
        }
        out.extend_from_slice(format!("{len} {k}=").as_bytes());
        out.extend_from_slice(v);
        out.push(b'\n');
    }
    out
}

/// One entry of a crafted rootfs tar.
struct Crafted<'a> {
    path: &'a str,
    dir: bool,
    mode: u32,
    data: &'a [u8],
    xattrs: &'a [(&'a str, &'a [u8])],
}

fn header(path: &str, typ: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    h.set_path(path).expect("path");
    h.set_entry_type(typ);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(1_600_000_000);
    h.set_size(size);
    h.set_cksum();
    h
}

/// A plain rootfs tar (the `docker export` kind of bundle) of `entries`.
fn rootfs_tar(entries: &[Crafted<'_>]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        if !e.xattrs.is_empty() {
            let records: Vec<(String, &[u8])> = e
                .xattrs
                .iter()
                .map(|(k, v)| (format!("SCHILY.xattr.{k}"), *v))
                .collect();
            let refs: Vec<(&str, &[u8])> = records.iter().map(|(k, v)| (k.as_str(), *v)).collect();
            let data = pax(&refs);
            let h = header(
                "./PaxHeaders/x",
                tar::EntryType::XHeader,
                0o644,
                data.len() as u64,
            );
            b.append(&h, data.as_slice()).expect("pax");
        }
        let (typ, size) = if e.dir {
            (tar::EntryType::Directory, 0)
        } else {
            (tar::EntryType::Regular, e.data.len() as u64)
        };
        b.append(&header(e.path, typ, e.mode, size), e.data)
            .expect("entry");
    }
    b.into_inner().expect("finish tar")
}

pub(crate) fn import_args<'a>(bundle: &'a str, dir: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec!["import", bundle, "--dir", dir];
    a.extend_from_slice(extra);
    a
}

/// Nothing of a failed import is in the store of `t`, and `dir` was not created.
fn nothing_imported(t: &Env, dir: &Path) {
    let store = t.path("home/store");
    for sub in ["tmp", "layers", "nodes", "envs"] {
        let left: Vec<PathBuf> = std::fs::read_dir(store.join(sub))
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{sub}/ after a failed import: {left:?}");
    }
    assert!(!dir.exists(), "{} was left behind", dir.display());
    assert_eq!(t.json(&["list"]), serde_json::json!([]));
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p)
        .expect("lstat")
        .permissions()
        .mode()
        & 0o7777
}

/// Every xattr name on any file of the store's layers.
fn layer_xattrs(t: &Env) -> Vec<String> {
    let mut out = Vec::new();
    for e in walkdir::WalkDir::new(t.path("home/store/layers")) {
        let e = e.expect("walk");
        if let Ok(names) = xattr::list(e.path()) {
            out.extend(names.map(|n| n.to_string_lossy().into_owned()));
        }
    }
    out
}

#[test]
fn setuid_capabilities_and_overlay_attributes_are_not_imported() {
    if !require_root("setuid_capabilities_and_overlay_attributes_are_not_imported") {
        return;
    }
    let t = Env::new();
    let tar = rootfs_tar(&[
        Crafted {
            path: "./",
            dir: true,
            mode: 0o755,
            data: b"",
            xattrs: &[],
        },
        Crafted {
            path: "./shared",
            dir: true,
            mode: 0o2775,
            data: b"",
            xattrs: &[],
        },
        Crafted {
            path: "./suid",
            dir: false,
            mode: 0o4755,
            data: b"#!/bin/sh\n",
            xattrs: &[],
        },
        Crafted {
            path: "./sgid",
            dir: false,
            mode: 0o2755,
            data: b"#!/bin/sh\n",
            xattrs: &[],
        },
        Crafted {
            path: "./ping",
            dir: false,
            mode: 0o755,
            data: b"ELF",
            xattrs: &[("security.capability", &CAP_NET_RAW)],
        },
        Crafted {
            path: "./redirected",
            dir: true,
            mode: 0o755,
            data: b"",
            xattrs: &[
                ("trusted.overlay.redirect", b"/etc"),
                ("user.overlay.metacopy", b""),
                ("user.kept", b"yes"),
            ],
        },
    ]);
    let bundle = t.path("crafted.tar");
    std::fs::write(&bundle, &tar).expect("write bundle");
    let b = bundle.to_str().expect("utf8");

    // Default: stripped, and the human output says how many.
    let dir = t.path("plain");
    let out = t.run(&import_args(
        b,
        dir.to_str().expect("utf8"),
        &["--name", "plain"],
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "stripped setuid/setgid or file capabilities from 3 files; --allow-setuid keeps them"
        ),
        "{text}"
    );
    assert!(text.contains("ignored 2 overlayfs attributes"), "{text}");
    assert_eq!(mode(&dir.join("suid")), 0o755);
    assert_eq!(mode(&dir.join("sgid")), 0o755);
    assert_eq!(mode(&dir.join("shared")), 0o2775, "setgid directories stay");
    assert_eq!(
        xattr::get(dir.join("ping"), "security.capability").expect("get"),
        None
    );
    assert_eq!(
        xattr::get(dir.join("redirected"), "user.kept").expect("get"),
        Some(b"yes".to_vec()),
        "other attributes are imported"
    );
    // Nothing overlayfs would obey reached a layer.
    let names = layer_xattrs(&t);
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("trusted.overlay.") || n.starts_with("user.overlay.")),
        "{names:?}"
    );

    // --json is the report alone, with the counts as data.
    let dir = t.path("quiet");
    let rep = t.json(&import_args(
        b,
        dir.to_str().expect("utf8"),
        &["--name", "quiet"],
    ));
    assert_eq!(rep["stripped_setuid"], 3, "{rep}");
    assert_eq!(rep["dropped_overlay_xattrs"], 2, "{rep}");

    // --allow-setuid keeps bits and capabilities; overlay attributes are refused anyway.
    let dir = t.path("kept");
    let out = t.run(&import_args(
        b,
        dir.to_str().expect("utf8"),
        &["--name", "kept", "--allow-setuid"],
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("stripped"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(mode(&dir.join("suid")), 0o4755);
    assert_eq!(mode(&dir.join("sgid")), 0o2755);
    assert_eq!(
        xattr::get(dir.join("ping"), "security.capability").expect("get"),
        Some(CAP_NET_RAW.to_vec())
    );
    let names = layer_xattrs(&t);
    assert!(
        !names.iter().any(|n| n == "trusted.overlay.redirect"),
        "{names:?}"
    );
    for name in ["plain", "quiet", "kept"] {
        let _ = std::process::Command::new("umount")
            .arg(t.path(name))
            .status();
    }
}

#[test]
fn import_help_documents_the_new_options() {
    let t = Env::new();
    let help = t.ok(&["import", "--help"]);
    assert!(help.contains("--allow-setuid"), "{help}");
    assert!(help.contains("stripped"), "{help}");
    assert!(help.contains("--max-size"), "{help}");
    assert!(help.contains("AGENTBOX_IMPORT_MAX_SIZE"), "{help}");
}

/// Replace the manifest (the first entry) of an uncompressed bundle, leaving every other
/// byte as `agentbox export` wrote it. The manifest's PAX header (its checksum record) is
/// rewritten for the new text, as an attacker would.
pub(crate) fn with_manifest(bundle: &[u8], edit: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
    let mut bundle = bundle;
    let first = tar::Header::from_byte_slice(&bundle[..512]);
    if first.entry_type() == tar::EntryType::XHeader {
        let size = first.entry_size().expect("size") as usize;
        bundle = &bundle[512 + size.div_ceil(512) * 512..];
    }
    let old = tar::Header::from_byte_slice(&bundle[..512]);
    assert_eq!(
        old.path_bytes().as_ref(),
        b"manifest.json",
        "manifest first"
    );
    let size = old.entry_size().expect("size") as usize;
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&bundle[512..512 + size]).expect("manifest JSON");
    edit(&mut manifest);
    let json = serde_json::to_vec_pretty(&manifest).expect("encode");
    let mut h = old.clone();
    h.set_size(json.len() as u64);
    h.set_cksum();
    let record = pax(&[("AGENTBOX.blake3", blake3::hash(&json).to_hex().as_bytes())]);
    let mut out = header(
        "PaxHeaders/manifest.json",
        tar::EntryType::XHeader,
        0o644,
        record.len() as u64,
    )
    .as_bytes()
    .to_vec();
    out.extend_from_slice(&record);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(&json);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out.extend_from_slice(&bundle[512 + size.div_ceil(512) * 512..]);
    out
}

#[test]
fn tags_are_validated_like_agentbox_tag_and_whiteouts_still_travel() {
    if !require_root("tags_are_validated_like_agentbox_tag_and_whiteouts_still_travel") {
        return;
    }
    let t = Env::new();
    let src = t.path("src");
    write(&src.join("keep"), "keep");
    write(&src.join("gone"), "soon deleted");
    std::fs::create_dir_all(src.join("emptied/sub")).expect("mkdir");
    write(&src.join("emptied/sub/f"), "f");
    t.ok(&["env", src.to_str().expect("utf8")]);
    t.ok(&["tag", "src", "v1"]);
    std::fs::remove_file(src.join("gone")).expect("rm");
    std::fs::remove_dir_all(src.join("emptied/sub")).expect("rm");
    t.ok(&["commit", "src", "-m", "deletions"]);
    let bundle = t.path("src.bundle");
    let b = bundle.to_str().expect("utf8");
    t.ok(&["export", "src", "--compress", "none", "-o", b]);
    let good = std::fs::read(&bundle).expect("read bundle");

    // The real bundle imports, with its deletions (whiteout markers the importer converts).
    let t2 = Env::new();
    let dir = t2.path("copy");
    t2.ok(&import_args(b, dir.to_str().expect("utf8"), &[]));
    assert!(dir.join("keep").exists());
    assert!(!dir.join("gone").exists(), "the deletion travelled");
    assert!(!dir.join("emptied/sub").exists(), "the deletion travelled");
    t2.ok(&["checkout", "copy", "v1"]);
    assert!(dir.join("gone").exists(), "the tag travelled");
    let _ = std::process::Command::new("umount").arg(&dir).status();

    for bad in ["../../escape", "HEAD", "beef", "a b", ".hidden"] {
        // `agentbox tag` refuses the name…
        let out = t.run(&["tag", "src", bad]);
        assert_eq!(code(&out), Some(4), "tag {bad:?}: {}", stderr(&out));
        // …and so does an import of a bundle carrying it.
        let crafted = with_manifest(&good, |m| {
            let head = m["head"].clone();
            m["tags"][bad] = head;
        });
        let evil = t.path("evil.bundle");
        std::fs::write(&evil, crafted).expect("write");
        let t3 = Env::new();
        let dir = t3.path("evil");
        let out = t3.run(&import_args(
            evil.to_str().expect("utf8"),
            dir.to_str().expect("utf8"),
            &[],
        ));
        assert_eq!(code(&out), Some(8), "{bad:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("invalid tag name {bad:?}")),
            "{bad:?}: {}",
            stderr(&out)
        );
        nothing_imported(&t3, &dir);
    }
    let _ = std::process::Command::new("umount").arg(&src).status();
}

/// A zstd-compressed rootfs tar holding `size` zero bytes: a few KiB that expand to `size`.
fn bomb(size: u64) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    b.append(&header("./", tar::EntryType::Directory, 0o755, 0), &b""[..])
        .expect("root");
    b.append(
        &header("./zeros", tar::EntryType::Regular, 0o644, size),
        std::io::repeat(0).take_bytes(size),
    )
    .expect("zeros");
    let tar = b.into_inner().expect("tar");
    zstd::encode_all(tar.as_slice(), 3).expect("zstd")
}

/// `Read::take` under a name that does not clash with `Iterator::take`.
trait TakeBytes: std::io::Read + Sized {
    fn take_bytes(self, n: u64) -> std::io::Take<Self> {
        std::io::Read::take(self, n)
    }
}
impl<R: std::io::Read> TakeBytes for R {}

#[test]
fn a_decompression_bomb_stops_at_the_limit_and_leaves_nothing() {
    let t = Env::new();
    let compressed = bomb(64 << 20);
    assert!(compressed.len() < 64 << 10, "{} bytes", compressed.len());
    let bundle = t.path("bomb.tar.zst");
    std::fs::write(&bundle, &compressed).expect("write");
    let b = bundle.to_str().expect("utf8");
    let dir = t.path("bomb");
    let d = dir.to_str().expect("utf8");
    for (args, envs) in [
        (import_args(b, d, &["--max-size", "1M"]), vec![]),
        (
            import_args(b, d, &[]),
            vec![("AGENTBOX_IMPORT_MAX_SIZE", "1M")],
        ),
    ] {
        let out = t.run_with(&args, &envs);
        assert_eq!(code(&out), Some(8), "{}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("expands past 1048576 bytes") && err.contains("--max-size"),
            "{err}"
        );
        nothing_imported(&t, &dir);
    }
    // Under the default limit (at least 16 GiB) the same bundle is fine to read; with a
    // limit above its size it is only refused for being a rootfs of one file, not bigger.
    let out = t.run(&import_args(b, d, &["--max-size", "65M"]));
    assert_ne!(code(&out), Some(8), "{}", stderr(&out));
    if out.status.success() {
        let _ = std::process::Command::new("umount").arg(&dir).status();
    }
}

/// Incompressible bytes (xorshift), so a bundle of them is as large as they are.
fn noise(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(n);
    out
}

#[test]
fn a_full_disk_is_reported_as_such_and_leaves_nothing() {
    if !require_root("a_full_disk_is_reported_as_such_and_leaves_nothing") {
        return;
    }
    let Some(fs) = agentbox_testkit::loopfs::LoopFs::ext4(32 << 20) else {
        return;
    };
    let t = Env::new();
    // The store (home) on the small filesystem; the bundle and the target elsewhere.
    std::os::unix::fs::symlink(fs.path(), t.path("home")).expect("symlink home");
    let data = noise(48 << 20);
    let tar = rootfs_tar(&[
        Crafted {
            path: "./",
            dir: true,
            mode: 0o755,
            data: b"",
            xattrs: &[],
        },
        Crafted {
            path: "./big",
            dir: false,
            mode: 0o644,
            data: &data,
            xattrs: &[],
        },
    ]);
    let bundle = t.path("big.tar.zst");
    std::fs::write(&bundle, zstd::encode_all(tar.as_slice(), 1).expect("zstd")).expect("write");
    let dir = t.path("big");
    let out = t.run(&import_args(
        bundle.to_str().expect("utf8"),
        dir.to_str().expect("utf8"),
        &[],
    ));
    let err = stderr(&out);
    assert_eq!(code(&out), Some(1), "{err}");
    assert!(err.contains("no space left on device"), "{err}");
    assert!(
        err.contains(&t.path("home").display().to_string())
            || err.contains(&fs.path().display().to_string()),
        "names the path: {err}"
    );
    assert!(
        !err.contains("damaged") && !err.contains("not written by"),
        "a full disk is not the archive's fault: {err}"
    );
    assert!(err.contains("free space"), "hint: {err}");
    nothing_imported(&t, &dir);
    // The store is consistent and has room again.
    t.ok(&["fsck"]);
}

#[test]
fn export_and_import_report_progress_on_a_stderr_that_is_not_a_terminal() {
    if !require_root("export_and_import_report_progress_on_a_stderr_that_is_not_a_terminal") {
        return;
    }
    let t = Env::new();
    let src = t.path("big");
    std::fs::create_dir_all(&src).expect("mkdir");
    for i in 0..8 {
        std::fs::write(src.join(format!("blob{i}")), noise(4 << 20)).expect("write");
    }
    t.ok(&["env", src.to_str().expect("utf8")]);
    let bundle = t.path("big.bundle");
    let b = bundle.to_str().expect("utf8");
    // `output()` gives the command pipes: not a terminal. A line every millisecond here
    // (5 s by default), so that a 32 MiB export surely prints some.
    let fast = [("AGENTBOX_PROGRESS_INTERVAL_MS", "1")];
    let out = t.run_with(&["export", "big", "-o", b], &fast);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("agentbox: exporting: "), "{err}");
    assert!(err.contains(" so far ("), "{err}");
    assert!(
        err.lines().last().is_some_and(|l| l.contains(", done (")),
        "the last line says it is done: {err}"
    );

    let t2 = Env::new();
    let dir = t2.path("copy");
    let out = t2.run_with(&import_args(b, dir.to_str().expect("utf8"), &[]), &fast);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("agentbox: importing: "), "{err}");
    assert!(err.contains(", done ("), "{err}");
    let _ = std::process::Command::new("umount").arg(&dir).status();

    // 0 turns the lines off.
    let again = t.path("again.bundle");
    let out = t.run_with(
        &["export", "big", "-o", again.to_str().expect("utf8")],
        &[("AGENTBOX_PROGRESS_INTERVAL_MS", "0")],
    );
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("agentbox: exporting"),
        "{}",
        stderr(&out)
    );
    let _ = std::process::Command::new("umount").arg(&src).status();
}
