//! Who a box's root is on the host: an unprivileged host id whose files keep their owners,
//! and box files mounted on the host never run setuid nor open as devices.

use super::*;

#[test]
fn box_root_is_an_unprivileged_host_id_whose_files_keep_their_owners() {
    let Some(s) = boxed(
        "box_root_is_an_unprivileged_host_id_whose_files_keep_their_owners",
        "ids",
        &[],
    ) else {
        return;
    };
    use std::os::unix::fs::MetadataExt;
    s.env.ok(&["start", "ids"]);
    let st = s.env.json(&["status", "ids"]);
    let uid = st["box"]["box_root"]["uid"]
        .as_u64()
        .expect("box root is a host id range") as u32;
    assert_ne!(uid, 0);
    assert!(s
        .env
        .ok(&["status", "ids"])
        .contains(&format!("box root:     host uid {uid}")));
    // Inside: root, mapped; a box process is that host id to the host's kernel.
    let (_, out, _) = s.sh("ids", "id -u; cat /proc/self/uid_map");
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("0"));
    let map: Vec<&str> = lines.next().expect("uid_map").split_whitespace().collect();
    assert_eq!(map, ["0", &uid.to_string(), "65536"]);
    let marker = format!("sleep {}", 700_000 + std::process::id() % 99_999);
    s.env.ok(&["spawn", "ids", "--", "sh", "-c", &marker]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let pid = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .find(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).replace('\0', " ").trim() == marker)
        })
        .expect("the box's process on the host")
        .path();
    assert_eq!(
        std::fs::metadata(&pid).expect("stat").uid(),
        uid,
        "host sees the box's process as its unprivileged id"
    );
    // Box root owns the base's root-owned files (it may change them in its layer), and
    // what it writes is owned on disk as the box says: root's files by root, others' by
    // their ids.
    let (status, _, err) = s.sh(
        "ids",
        "echo changed >> /etc/hostname && echo mine > /workspace/mine && echo theirs > /workspace/theirs && chown 1000:1000 /workspace/theirs",
    );
    assert_eq!(status, 0, "{err}");
    s.env.ok(&["stop", "ids"]);
    let owner_of = |name: &str| {
        walkdir::WalkDir::new(s.env.path("home/store"))
            .into_iter()
            .flatten()
            .find(|e| e.file_name() == name)
            .map(|e| {
                let m = e.metadata().expect("stat");
                (m.uid(), m.gid())
            })
            .unwrap_or_else(|| panic!("{name} is in the box's layer"))
    };
    assert_eq!(owner_of("mine"), (0, 0));
    assert_eq!(owner_of("theirs"), (1000, 1000));
    assert_eq!(owner_of("hostname"), (0, 0));
    // A checkout that keeps the processes writes owners the same way.
    s.env.ok(&["exec", "ids", "--", "rm", "/workspace/theirs"]);
    s.env.ok(&["checkout", "ids", "--keep-processes", "HEAD~1"]);
    let (_, out, _) = s.sh("ids", "stat -c '%u %g' /workspace/theirs");
    assert_eq!(out, "1000 1000\n");
}

#[test]
fn box_files_mounted_on_the_host_never_run_setuid_or_open_as_devices() {
    let Some(s) = boxed(
        "box_files_mounted_on_the_host_never_run_setuid_or_open_as_devices",
        "suid",
        &[],
    ) else {
        return;
    };
    let (status, _, err) = s.sh(
        "suid",
        "cp /usr/bin/id /workspace/id && chmod 4755 /workspace/id",
    );
    assert_eq!(status, 0, "{err}");
    let bundle = s.env.path("suid.bundle");
    s.env
        .ok(&["export", "suid", "-o", bundle.to_str().expect("utf-8")]);
    // Imported into the same store, the box's own layer is reused as it is: the mount
    // is what keeps its setuid bit from meaning anything on the host.
    let dir = s.env.path("imported");
    s.env.ok(&[
        "import",
        bundle.to_str().expect("utf-8"),
        "--name",
        "imported",
        "--dir",
        dir.to_str().expect("utf-8"),
    ]);
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let line = mountinfo
        .lines()
        .find(|l| l.split(' ').nth(4) == dir.to_str())
        .expect("the environment is mounted");
    let opts = line.split(' ').nth(5).expect("mount options");
    assert!(
        opts.split(',').any(|o| o == "nosuid") && opts.split(',').any(|o| o == "nodev"),
        "{line}"
    );
}
