//! A box's disk: `--disk` bounds what a box writes, with the store's filesystem's own
//! quotas (btrfs qgroups, ext4 project quotas), so a box cannot fill the host's disk; a
//! filesystem without quotas refuses the flag rather than pretend.

use std::path::Path;

use super::Sec;
use crate::common::{code, stderr, write, Env};
use agentbox_testkit::loopfs::LoopFs;
use agentbox_testkit::tier::require_root;

/// Bytes free on the filesystem of `path`, as `df` says.
fn free_bytes(path: &Path) -> u64 {
    let out = std::process::Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(path)
        .output()
        .expect("df");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .expect("df's figure")
}

/// A home on `fs` with box `name` made with `--disk 50M`.
fn limited_box(fs: &LoopFs, name: &str) -> Sec {
    let s = Sec { env: Env::new() };
    std::os::unix::fs::symlink(fs.path(), s.env.path("home")).expect("symlink home");
    let proj = s.env.path("proj");
    write(&proj.join("README"), "readme\n");
    s.env.ok(&[
        "create",
        name,
        "--from",
        proj.to_str().expect("utf-8"),
        "--disk",
        "50M",
    ]);
    s
}

/// The box writes 200 MiB: the write fails at about 50 MiB with the quota's error, the
/// host's filesystem keeps its room, and the box goes on working.
fn write_past_the_limit(s: &Sec, name: &str, fs: &LoopFs, what: &str) {
    let before = free_bytes(fs.path());
    let (status, _, err) = s.sh(
        name,
        "dd if=/dev/zero of=/workspace/big bs=1M count=200 conv=fsync",
    );
    let (_, size, _) = s.sh(name, "stat -c %s /workspace/big");
    let size: u64 = size.trim().parse().unwrap_or(0);
    assert!(
        err.contains("Disk quota exceeded") || err.contains("No space left"),
        "{what}: status {status}: {err}"
    );
    assert_ne!(status, 0, "{what}: {err}");
    assert!(size <= 50 << 20, "{what}: the box wrote {size} bytes");
    let used = before.saturating_sub(free_bytes(fs.path()));
    eprintln!(
        "{what} ({:?}): the box wrote {size} bytes, the store's filesystem {used} bytes, {} free",
        fs.fs_type(),
        free_bytes(fs.path())
    );
    assert!(
        free_bytes(fs.path()) > 100 << 20,
        "{what}: the store's filesystem kept its room ({used} bytes used)"
    );
    let (status, _, err) = s.sh(
        name,
        "rm /workspace/big && echo fine > /workspace/after && cat /workspace/after",
    );
    assert_eq!(status, 0, "{what}: the box still works: {err}");
}

fn a_box_cannot_fill_the_store(test: &str, fs: Option<LoopFs>) {
    if !require_root(test) {
        return;
    }
    let Some(fs) = fs else {
        return;
    };
    let s = limited_box(&fs, "disk");
    let status = s.env.ok(&["status", "disk"]);
    assert!(status.contains("disk "), "{status}");
    assert!(status.contains("50.0 MiB"), "{status}");
    write_past_the_limit(&s, "disk", &fs, "first work area");
    // A checkout makes the work area anew: it is limited the same.
    s.env.ok(&["checkout", "disk", "HEAD~1"]);
    write_past_the_limit(&s, "disk", &fs, "after a checkout");
    // And a stop and start (the work area kept).
    s.env.ok(&["stop", "disk"]);
    write_past_the_limit(&s, "disk", &fs, "after a restart");
    s.env.ok(&["destroy", "disk"]);
}

#[test]
fn a_box_cannot_fill_a_btrfs_store() {
    let test = "a_box_cannot_fill_a_btrfs_store";
    a_box_cannot_fill_the_store(test, LoopFs::btrfs(512 << 20));
}

#[test]
fn a_box_cannot_fill_an_ext4_store_with_project_quotas() {
    let test = "a_box_cannot_fill_an_ext4_store_with_project_quotas";
    if kernel_config("CONFIG_QFMT_V2") == Some(false) {
        // Not a missing capability of the machine the test could be given: the running
        // kernel was built without the quota format ext4's quota feature needs, so no ext4
        // filesystem here can hold a project quota. On such a kernel `--disk` on ext4 is
        // refused (`disk_is_refused_where_the_filesystem_cannot_enforce_it`). The kernel's
        // own configuration says so; on a kernel that has it, the test runs in full.
        eprintln!(
            "{test}: this kernel was built without CONFIG_QFMT_V2: ext4 cannot hold project quotas"
        );
        return;
    }
    a_box_cannot_fill_the_store(test, LoopFs::ext4_project_quotas(512 << 20));
}

/// Whether the running kernel was built with `option` (`/proc/config.gz`); `None` when the
/// kernel does not publish its configuration.
fn kernel_config(option: &str) -> Option<bool> {
    let out = std::process::Command::new("zcat")
        .arg("/proc/config.gz")
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let text = String::from_utf8_lossy(&out.stdout);
    Some(text.lines().any(|l| {
        l.strip_prefix(option)
            .is_some_and(|rest| rest == "=y" || rest == "=m")
    }))
}

#[test]
fn disk_is_refused_where_the_filesystem_cannot_enforce_it() {
    let test = "disk_is_refused_where_the_filesystem_cannot_enforce_it";
    if !require_root(test) {
        return;
    }
    let Some(fs) = LoopFs::ext4(256 << 20) else {
        return;
    };
    let s = Sec { env: Env::new() };
    std::os::unix::fs::symlink(fs.path(), s.env.path("home")).expect("symlink home");
    let proj = s.env.path("proj");
    write(&proj.join("README"), "readme\n");
    let p = proj.to_str().expect("utf-8");
    let out = s
        .env
        .run(&["create", "nolimit", "--from", p, "--disk", "50M"]);
    assert_ne!(code(&out), Some(0));
    let err = stderr(&out);
    assert!(
        err.contains("does not enforce project quotas") && err.contains("prjquota"),
        "{err}"
    );
    assert!(err.contains("without --disk"), "the hint: {err}");
    let list = s.env.ok(&["list"]);
    assert!(!list.contains("nolimit"), "nothing was made: {list}");
    // A bad size is a usage error.
    let out = s.env.run(&["create", "bad", "--from", p, "--disk", "lots"]);
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
    // Without --disk the box is made (no limit, as documented).
    s.env.ok(&["create", "free", "--from", p]);
    let status = s.env.ok(&["status", "free"]);
    assert!(!status.contains("disk "), "{status}");
}

/// A rootless box cannot have its disk limited (quotas need CAP_SYS_ADMIN on the host): the
/// flag is refused before anything is made, saying so.
#[test]
fn disk_is_refused_for_a_rootless_box_with_the_reason() {
    let test = "disk_is_refused_for_a_rootless_box_with_the_reason";
    if !require_root(test) {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
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
    let p = proj.to_str().expect("utf-8");
    let out = crate::common::as_nobody(&home, &["create", "r", "--from", p, "--disk", "50M"]);
    assert_ne!(code(&out), Some(0));
    assert!(
        stderr(&out).contains("a disk limit needs root"),
        "{}",
        stderr(&out)
    );
    let out = crate::common::as_nobody(&home, &["list"]);
    let list = String::from_utf8_lossy(&out.stdout);
    assert!(
        !list
            .lines()
            .any(|l| l.split_whitespace().next() == Some("r")),
        "nothing was made: {list}"
    );
}
