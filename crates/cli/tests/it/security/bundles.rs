//! Bundles a box makes and the user imports on the host: a bundle is the box's text, so
//! nothing in it may give a file a privilege (`trusted.*`/`security.*` xattrs), pass an
//! unverified manifest, or make the store write far more than the bundle's own size.
//!
//! Root only: the host side of each attack is `agentbox import` run by the user, and the
//! privileged xattrs it must refuse can only be written by root anyway (a rootless import
//! could not apply them whatever the bundle says).

use std::io::Write;
use std::path::Path;

use super::{boxed, python, Sec};
use crate::common::{code, stderr};

/// Every xattr name on any path under `root` (not following symlinks).
fn xattr_names(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in walkdir::WalkDir::new(root).into_iter().flatten() {
        if let Ok(names) = xattr::list(e.path()) {
            out.extend(names.map(|n| n.to_string_lossy().into_owned()));
        }
    }
    out
}

/// The bytes of `/workspace/NAME` in box `name`, read through `exec` as the host would
/// receive anything a box hands out.
fn take_out(s: &Sec, name: &str, file: &str) -> Vec<u8> {
    let out = s
        .env
        .run(&["exec", name, "--", "cat", &format!("/workspace/{file}")]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    out.stdout
}

/// Give the box the host file `src` as `/workspace/NAME` (through `exec`'s stdin).
fn hand_in(s: &Sec, name: &str, src: &Path, file: &str) {
    let mut child = s
        .env
        .command(&[
            "exec",
            name,
            "--",
            "sh",
            "-c",
            &format!("cat > /workspace/{file}"),
        ])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&std::fs::read(src).expect("read"))
        .expect("write");
    assert!(child.wait().expect("wait").success());
}

/// Nothing of a refused import of environment `env` is left: no environment, no `dir`, an
/// empty staging area.
fn nothing_left(s: &Sec, env: &str, dir: &Path) {
    assert!(!dir.exists(), "{} was left behind", dir.display());
    let list = s.env.ok(&["list"]);
    assert!(
        !list
            .lines()
            .any(|l| l.split_whitespace().next() == Some(env)),
        "{list}"
    );
    let tmp: Vec<_> = std::fs::read_dir(s.env.path("home/store/tmp"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(tmp.is_empty(), "staging left behind: {tmp:?}");
}

#[test]
fn a_box_made_bundle_sets_no_privileged_xattr_on_the_host() {
    let Some(s) = boxed(
        "a_box_made_bundle_sets_no_privileged_xattr_on_the_host",
        "xa",
        &[],
    ) else {
        return;
    };
    if !python(&s, "xa") {
        return;
    }
    // A rootfs bundle (a plain tar, as `docker export` writes) whose files carry an SELinux
    // label, an arbitrary security.* and trusted.* attribute, and an overlayfs redirect.
    let script = r#"
import io, tarfile
t = tarfile.open('/workspace/evil.tar', 'w', format=tarfile.PAX_FORMAT)
def add(name, data=None, xattrs={}):
    ti = tarfile.TarInfo(name)
    ti.pax_headers = {'SCHILY.xattr.' + k: v for k, v in xattrs.items()}
    ti.mode = 0o755
    if data is None:
        ti.type = tarfile.DIRTYPE
        t.addfile(ti)
    else:
        ti.size = len(data)
        t.addfile(ti, io.BytesIO(data))
add('./')
add('./tool', b'#!/bin/sh\n', {'security.selinux': 'system_u:object_r:shadow_t:s0',
                                'security.agentbox_evil': 'x', 'user.kept': 'yes'})
add('./d', None, {'trusted.agentbox_evil': 'x', 'trusted.overlay.redirect': '/etc'})
t.close()
"#;
    let out = s.env.run(&["exec", "xa", "--", "python3", "-c", script]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let bundle = s.env.path("evil.tar");
    std::fs::write(&bundle, take_out(&s, "xa", "evil.tar")).expect("write");
    let dir = s.env.path("imported");
    let out = s.env.run(&[
        "import",
        bundle.to_str().expect("utf-8"),
        "--name",
        "imported",
        "--dir",
        dir.to_str().expect("utf-8"),
    ]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("ignored 3 privileged attributes (trusted.*, security.*)"),
        "{text}"
    );
    assert!(text.contains("ignored 1 overlayfs attribute"), "{text}");
    let mut names = xattr_names(&dir);
    names.extend(xattr_names(&s.env.path("home/store/layers")));
    assert!(names.iter().any(|n| n == "user.kept"), "{names:?}");
    let privileged: Vec<_> = names
        .iter()
        .filter(|n| n.contains("agentbox_evil") || n.contains("selinux") || n.contains("redirect"))
        .collect();
    assert!(privileged.is_empty(), "{privileged:?}");
    let _ = std::process::Command::new("umount").arg(&dir).status();
}

#[test]
fn a_box_edited_bundle_manifest_is_refused_without_its_checksum() {
    let Some(s) = boxed(
        "a_box_edited_bundle_manifest_is_refused_without_its_checksum",
        "mf",
        &[],
    ) else {
        return;
    };
    if !python(&s, "mf") {
        return;
    }
    let (status, _, err) = s.sh("mf", "echo data > /workspace/data");
    assert_eq!(status, 0, "{err}");
    let good = s.env.path("good.tar");
    s.env.ok(&[
        "export",
        "mf",
        "--compress",
        "none",
        "-o",
        good.to_str().expect("utf-8"),
    ]);
    hand_in(&s, "mf", &good, "good.tar");
    // The box drops the manifest's checksum record (the PAX header before it), and, in a
    // second copy, changes the manifest under its checksum.
    let script = r#"
data = open('/workspace/good.tar', 'rb').read()
assert data[156:157] == b'x', 'the manifest has a PAX header'
size = int(data[124:136].strip(b'\0 ') or b'0', 8)
rest = data[512 + (size + 511) // 512 * 512:]
assert rest[:13] == b'manifest.json'
open('/workspace/unsigned.tar', 'wb').write(rest)
at = data.index(b'"env"')
edited = data[:at + 9] + bytes([data[at + 9] ^ 1]) + data[at + 10:]
open('/workspace/edited.tar', 'wb').write(edited)
"#;
    let out = s.env.run(&["exec", "mf", "--", "python3", "-c", script]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    for (file, needle) in [
        (
            "unsigned.tar",
            "entry manifest.json: no AGENTBOX.blake3 record",
        ),
        ("edited.tar", "entry manifest.json: checksum mismatch"),
    ] {
        let bundle = s.env.path(file);
        std::fs::write(&bundle, take_out(&s, "mf", file)).expect("write");
        let dir = s.env.path("evil");
        let out = s.env.run(&[
            "import",
            bundle.to_str().expect("utf-8"),
            "--name",
            "evil",
            "--dir",
            dir.to_str().expect("utf-8"),
        ]);
        assert_eq!(code(&out), Some(8), "{file}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{file}: {}", stderr(&out));
        nothing_left(&s, "evil", &dir);
    }
    // The untouched bundle still imports.
    let dir = s.env.path("copy");
    s.env.ok(&[
        "import",
        good.to_str().expect("utf-8"),
        "--name",
        "copy",
        "--dir",
        dir.to_str().expect("utf-8"),
    ]);
    assert!(
        walkdir::WalkDir::new(&dir)
            .into_iter()
            .flatten()
            .any(|e| e.file_name() == "data"),
        "the box's file is in the import"
    );
    let _ = std::process::Command::new("umount").arg(&dir).status();
}

#[test]
fn a_tiny_box_made_bundle_cannot_expand_to_gigabytes() {
    let Some(s) = boxed(
        "a_tiny_box_made_bundle_cannot_expand_to_gigabytes",
        "bomb",
        &[],
    ) else {
        return;
    };
    if !python(&s, "bomb") {
        return;
    }
    // 400 MiB of zeros, gzip'd by the box to well under 1 MiB.
    let script = r#"
import tarfile
class Zeros:
    def __init__(self, n): self.n = n
    def read(self, k=-1):
        k = self.n if k < 0 else min(k, self.n)
        self.n -= k
        return bytes(k)
t = tarfile.open('/workspace/bomb.tar.gz', 'w:gz', compresslevel=9)
d = tarfile.TarInfo('./'); d.type = tarfile.DIRTYPE; d.mode = 0o755; t.addfile(d)
f = tarfile.TarInfo('./zeros'); f.size = 400 << 20; f.mode = 0o644
t.addfile(f, Zeros(f.size))
t.close()
"#;
    let out = s.env.run(&["exec", "bomb", "--", "python3", "-c", script]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let bytes = take_out(&s, "bomb", "bomb.tar.gz");
    assert!(bytes.len() < 1 << 20, "{} bytes", bytes.len());
    let bundle = s.env.path("bomb.tar.gz");
    std::fs::write(&bundle, &bytes).expect("write");
    let dir = s.env.path("boom");
    let out = s.env.run(&[
        "import",
        bundle.to_str().expect("utf-8"),
        "--name",
        "boom",
        "--dir",
        dir.to_str().expect("utf-8"),
    ]);
    assert_eq!(code(&out), Some(8), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("entry ./zeros declares 419430400 bytes, refused before writing it")
            && err.contains("at least 256 MiB")
            && err.contains("--max-size"),
        "{err}"
    );
    nothing_left(&s, "boom", &dir);
}
