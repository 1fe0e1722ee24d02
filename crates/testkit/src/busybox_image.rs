//! The Docker test image: a root filesystem of the host's static busybox (no image can be
//! pulled in tests), imported once per content on each engine. Shared by the tests of the
//! Docker client and of the Docker provider; the engine is theirs (this crate does not
//! depend on the client), reached through the two functions they pass.

use std::io::Write;
use std::path::Path;

const BUSYBOX: &str = "/bin/busybox";

/// The commands the image has (links to busybox in `/bin`).
pub const APPLETS: &[&str] = &[
    "sh", "cat", "echo", "grep", "sleep", "ls", "mkdir", "id", "env", "printf", "wc", "rm", "test",
    "true", "false", "kill", "find", "touch", "ps", "head", "tr", "mv", "cp", "chmod", "sed",
    "stat", "date", "stty", "xargs", "cmp", "readlink",
];

/// The test image's name, `agentbox-test-busybox:<tag>`, the tag being the hash of the
/// busybox binary and [`APPLETS`]: the image changes exactly when either does. Imported
/// with `import(tar, repo, tag, changes)` unless `exists(name)` says the engine has it.
pub fn busybox_image(
    exists: impl Fn(&str) -> bool,
    import: impl FnOnce(&Path, &str, &str, &[String]),
) -> String {
    let bin = fs_err::read(BUSYBOX).expect("read busybox");
    let mut h = blake3::Hasher::new();
    h.update(&bin);
    for a in APPLETS {
        h.update(a.as_bytes());
        h.update(b"\0");
    }
    let tag = h.finalize().to_hex()[..16].to_owned();
    let repo = "agentbox-test-busybox";
    let name = format!("{repo}:{tag}");
    // Tests run in parallel processes: one imports, the others wait and find it (two
    // imports under one tag would leave the first one's image untagged behind).
    let lock = std::fs::File::create(std::env::temp_dir().join("agentbox-test-busybox.lock"))
        .expect("lock file");
    lock.lock().expect("lock");
    if exists(&name) {
        return name;
    }
    let dir = tempfile::tempdir().expect("tmp");
    let tar_path = dir.path().join("rootfs.tar");
    let mut b = tar::Builder::new(fs_err::File::create(&tar_path).expect("tar"));
    let mut dir_entry = |path: &str, mode: u32| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(mode);
        h.set_size(0);
        b.append_data(&mut h, path, std::io::empty()).expect("dir");
    };
    for d in ["bin", "etc", "proc", "sys", "dev", "workspace"] {
        dir_entry(d, 0o755);
    }
    dir_entry("tmp", 0o1777);
    let mut h = tar::Header::new_gnu();
    h.set_mode(0o755);
    h.set_size(bin.len() as u64);
    b.append_data(&mut h, "bin/busybox", bin.as_slice())
        .expect("busybox");
    for applet in APPLETS {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_mode(0o777);
        h.set_size(0);
        b.append_link(&mut h, format!("bin/{applet}"), "busybox")
            .expect("applet");
    }
    b.into_inner().expect("finish").flush().expect("flush");
    import(
        &tar_path,
        repo,
        &tag,
        &["ENV PATH=/bin".into(), "WORKDIR /workspace".into()],
    );
    name
}
