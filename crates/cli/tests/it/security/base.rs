//! The host's `/` as a box sees it: an allow-list of system paths (`/usr`, `/etc`, package
//! state), nothing else unless `box.hostPaths` shows it, and nothing there that an
//! unprivileged host user could not read — although box root owns the host's files through
//! the idmapped base. Host files are planted where a careless host would have them; the box
//! tries to read them as an agent would.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{python, Sec};
use crate::common::{as_nobody, code, kill_supervisors, stderr, write, Env};
use agentbox_testkit::tier::require_root;

const MARKER: &str = "HOST-SECRET-H8-5519";

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// Host paths a test made, removed when it ends.
struct Planted {
    tag: String,
    made: Vec<PathBuf>,
}

impl Planted {
    fn new() -> Planted {
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        Planted {
            tag: format!("agentbox-base-{}-{n}", std::process::id()),
            made: Vec::new(),
        }
    }

    /// `content` at `path` with `mode`; `top` (an ancestor of `path`, or `path`) is what the
    /// test removes afterwards.
    fn file(&mut self, top: &Path, path: &Path, content: &str, mode: u32) -> String {
        write(path, content);
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        if !self.made.iter().any(|m| m == top) {
            self.made.push(top.to_owned());
        }
        path.display().to_string()
    }

    fn chmod(&self, path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
}

impl Drop for Planted {
    fn drop(&mut self) {
        for p in &self.made {
            if p.is_dir() {
                let _ = std::fs::remove_dir_all(p);
            } else {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// What the attack tries: host files a box must not read, and one it may (`shown`, with a
/// root-only file beside it), made before the box starts.
struct Targets {
    planted: Planted,
    /// Paths the box must not read.
    secret: Vec<String>,
    /// The directory `box.hostPaths` shows.
    shown_dir: String,
    /// A world-readable file in it.
    shown: String,
}

fn plant() -> Targets {
    let mut p = Planted::new();
    let tag = p.tag.clone();
    let mut secret = Vec::new();
    // Root-only files within the allowed system paths: box root owns them through the
    // idmapped base.
    let f = PathBuf::from(format!("/etc/{tag}-secret"));
    secret.push(p.file(&f, &f, MARKER, 0o600));
    let d = PathBuf::from(format!("/etc/{tag}-private"));
    secret.push(p.file(&d, &d.join("inner"), MARKER, 0o644));
    p.chmod(&d, 0o700);
    if Path::new("/var/cache/debconf").is_dir() {
        let f = PathBuf::from(format!("/var/cache/debconf/{tag}-passwords.dat"));
        secret.push(p.file(&f, &f, MARKER, 0o600));
    }
    let f = PathBuf::from(format!("/usr/share/{tag}-group-only"));
    secret.push(p.file(&f, &f, MARKER, 0o640));
    // Another agentbox home (0700) with a saved token, in an allowed path.
    let h = PathBuf::from(format!("/usr/local/{tag}-agentbox"));
    secret.push(p.file(&h, &h.join("home/broker/token"), MARKER, 0o644));
    p.chmod(&h, 0o700);
    // World-readable data outside the allow-list: a fresh top-level directory, /srv, /opt,
    // /home, /var/log, /var/lib.
    for dir in [
        format!("/{tag}"),
        format!("/srv/{tag}"),
        format!("/opt/{tag}"),
        format!("/home/{tag}"),
        format!("/var/lib/{tag}"),
    ] {
        let d = PathBuf::from(dir);
        secret.push(p.file(&d, &d.join("data"), MARKER, 0o644));
    }
    let f = PathBuf::from(format!("/var/log/{tag}.log"));
    secret.push(p.file(&f, &f, MARKER, 0o644));
    // Shown by `box.hostPaths`: the world-readable file is read, the root-only one not.
    let s = PathBuf::from(format!("/srv/{tag}-shown"));
    let shown = p.file(&s, &s.join("ok"), "shown-ok\n", 0o644);
    secret.push(p.file(&s, &s.join("root-only"), MARKER, 0o600));
    Targets {
        shown_dir: s.display().to_string(),
        planted: p,
        secret,
        shown,
    }
}

/// The attack, through `sh`: every secret unreadable (and no marker anywhere in what the box
/// printed), the shown file readable, the system's programs and files working.
fn attack(t: &Targets, sh: &dyn Fn(&str) -> (i32, String)) {
    for s in &t.secret {
        let (status, out) = sh(&format!("cat '{s}'"));
        assert_ne!(status, 0, "{s} is readable in the box: {out}");
        assert!(!out.contains(MARKER), "{s}: {out}");
    }
    // A hidden directory is at most an empty one.
    let (_, out) = sh(&format!(
        "ls -A /{tag} /srv/{tag} /opt/{tag} /home/{tag} /var/lib/{tag} 2>/dev/null | grep -c data || true",
        tag = t.planted.tag
    ));
    assert_eq!(out.trim_end(), "0", "{out}");
    let (status, out) = sh(&format!("cat '{}'", t.shown));
    assert_eq!((status, out.as_str()), (0, "shown-ok\n"), "{}", t.shown);
    let host_name = if Path::new("/etc/hostname").exists() {
        "test -r /etc/hostname &&"
    } else {
        ""
    };
    let (status, out) = sh(&format!(
        "/usr/bin/sh -c 'echo sh-ok' && grep -q '^root:' /etc/passwd && {host_name} \
         git --version >/dev/null && echo system-ok"
    ));
    assert_eq!(status, 0, "{out}");
    assert!(out.contains("sh-ok") && out.contains("system-ok"), "{out}");
}

/// In a root box.
#[test]
fn the_base_shows_system_paths_only_and_nothing_others_cannot_read_root() {
    let test = "the_base_shows_system_paths_only_and_nothing_others_cannot_read_root";
    if !require_root(test) {
        return;
    }
    let t = plant();
    let env = Env::new();
    env.ok(&["config", "set", "--global", "box.hostPaths", &t.shown_dir]);
    let proj = env.path("proj");
    write(&proj.join("README"), "readme\n");
    env.ok(&["create", "base", "--from", proj.to_str().expect("utf-8")]);
    let s = Sec { env };
    let sh = |script: &str| {
        let (status, out, err) = s.sh("base", script);
        (status, format!("{out}{err}"))
    };
    attack(&t, &sh);
    // Box root still owns the system paths: it changes them in its own layer.
    let made = format!("/etc/{}-made", t.planted.tag);
    let (status, out, err) = s.sh(
        "base",
        &format!(
            "echo box > '{made}' && echo box >> /usr/share/{}-made && cat '{made}'",
            t.planted.tag
        ),
    );
    assert_eq!((status, out.as_str()), (0, "box\n"), "{err}");
    assert!(!Path::new(&made).exists(), "a box's write reached the host");
    if python(&s, "base") {
        let (status, out, err) = s.sh("base", "python3 -c 'import json, ssl; print(\"py-ok\")'");
        assert_eq!((status, out.as_str()), (0, "py-ok\n"), "{err}");
    }
    // The host's files are as they were.
    for f in &t.secret {
        assert_eq!(std::fs::read_to_string(f).expect("read"), MARKER, "{f}");
    }
    assert!(!Path::new(&format!("/usr/share/{}-made", t.planted.tag)).exists());
}

/// In a rootless box (run by `nobody`): the same holds, the kernel holding box root to the
/// files' modes.
#[test]
fn the_base_shows_system_paths_only_and_nothing_others_cannot_read_rootless() {
    let test = "the_base_shows_system_paths_only_and_nothing_others_cannot_read_rootless";
    if !require_root(test) {
        return;
    }
    let t = plant();
    let env = Env::new();
    let root = env.home.path().to_owned();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let home = root.join("nobody-home");
    let proj = root.join("proj");
    write(&proj.join("README"), "readme\n");
    std::fs::create_dir(&home).expect("mkdir");
    for p in [&home, &proj] {
        crate::common::chown_nobody(p);
    }
    let ok = |args: &[&str]| {
        let out = as_nobody(&home, args);
        assert_eq!(code(&out), Some(0), "{args:?}: {}", stderr(&out));
    };
    ok(&["config", "set", "--global", "box.hostPaths", &t.shown_dir]);
    ok(&["create", "base", "--from", proj.to_str().expect("utf-8")]);
    let sh = |script: &str| {
        let out = as_nobody(&home, &["exec", "base", "--", "sh", "-c", script]);
        (
            code(&out).unwrap_or(-1),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out)),
        )
    };
    attack(&t, &sh);
    kill_supervisors(&home);
}

/// Unmounts what is mounted below a directory when dropped (after the boxes, before the
/// files).
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        agentbox_testkit::unmount_below(&self.0);
    }
}

/// `setup --btrfs --image` outside `/var/lib` (btrfs reports an anonymous device, so the
/// image is found from the store mount's source), the image readable by all and its
/// directory shown by `box.hostPaths`: the box still cannot read the image, which holds
/// every box's layers.
#[test]
fn the_store_image_stays_hidden_wherever_it_is() {
    let test = "the_store_image_stays_hidden_wherever_it_is";
    if !require_root(test) {
        return;
    }
    let mkfs = [
        "/usr/sbin/mkfs.btrfs",
        "/sbin/mkfs.btrfs",
        "/usr/bin/mkfs.btrfs",
    ];
    if !mkfs.iter().any(|p| Path::new(p).exists())
        && !agentbox_testkit::tier::skip(test, "mkfs.btrfs is not installed")
    {
        return;
    }
    let mut p = Planted::new();
    let dir = PathBuf::from(format!("/srv/{}-store", p.tag));
    let beside = p.file(&dir, &dir.join("beside"), "beside\n", 0o644);
    let image = dir.join("store.img");
    let env = Env::new();
    let _unmount = Unmount(env.path("home"));
    let image_s = image.to_str().expect("utf-8");
    env.ok(&["setup", "--btrfs", "300M", "--image", image_s]);
    // A careless host: the image readable by every user.
    p.chmod(&image, 0o644);
    env.ok(&[
        "config",
        "set",
        "--global",
        "box.hostPaths",
        dir.to_str().expect("utf-8"),
    ]);
    let proj = env.path("proj");
    write(&proj.join("README"), "readme\n");
    env.ok(&["create", "img", "--from", proj.to_str().expect("utf-8")]);
    let s = Sec { env };
    assert_eq!(s.env.json(&["status", "img"])["backend"], "btrfs");
    let (status, out, err) = s.sh("img", &format!("cat '{beside}'"));
    assert_eq!((status, out.as_str()), (0, "beside\n"), "{err}");
    let (status, out, err) = s.sh(
        "img",
        &format!("head -c 4096 '{image_s}' | wc -c; test -e '{image_s}' && echo image-there"),
    );
    assert!(!out.contains("image-there"), "{status} {out}{err}");
    assert_eq!(out.lines().next(), Some("0"), "{out}{err}");
}
