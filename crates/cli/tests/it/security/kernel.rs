//! The kernel as a box reaches it: its knobs, device nodes, the keyring, BPF, nested
//! namespaces and raw sockets are denied, and a rootless box gets the same hardening.

use std::path::Path;

use crate::common::{stderr, write};

use super::*;

#[test]
fn host_kernel_knobs_cannot_be_changed_from_a_box() {
    let Some(s) = boxed(
        "host_kernel_knobs_cannot_be_changed_from_a_box",
        "knobs",
        &[],
    ) else {
        return;
    };
    let before = std::fs::read_to_string("/proc/sys/kernel/core_pattern").expect("core_pattern");
    let forward = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").expect("ip_forward");
    // The attack of a core_pattern pipe into a script of the box's layer.
    let (_, out, err) = s.sh(
        "knobs",
        "printf '#!/bin/sh\\ntouch /tmp/pwned\\n' > /workspace/evil; chmod +x /workspace/evil;
         echo '|/workspace/evil' > /proc/sys/kernel/core_pattern && echo wrote-core-pattern;
         echo 1 > /proc/sys/net/ipv4/ip_forward && echo wrote-ip-forward;
         echo 3 > /proc/sys/vm/drop_caches && echo wrote-drop-caches;
         echo h > /proc/sysrq-trigger && echo wrote-sysrq;
         cat /proc/keys /proc/timer_list 2>/dev/null | wc -c;
         ls -A /sys/firmware | wc -l",
    );
    assert!(!out.contains("wrote-"), "{out}{err}");
    assert!(err.contains("Read-only file system"), "{err}");
    let counts: Vec<&str> = out.lines().collect();
    assert_eq!(
        counts,
        ["0", "0"],
        "masked /proc files and /sys/firmware: {out}"
    );
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/core_pattern").expect("core_pattern"),
        before
    );
    assert_eq!(
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").expect("ip_forward"),
        forward
    );
}

#[test]
fn a_box_cannot_make_or_use_device_nodes() {
    let Some(s) = boxed("a_box_cannot_make_or_use_device_nodes", "devs", &[]) else {
        return;
    };
    // A block device of a host disk (the first loop device, or the root disk's).
    let (status, _, err) = s.sh("devs", "mknod /workspace/disk b 7 0");
    assert_ne!(status, 0, "mknod of a block device worked");
    assert!(err.contains("Operation not permitted"), "{err}");
    let (_, out, _) = s.sh(
        "devs",
        "test -e /dev/kmsg && echo kmsg; test -e /dev/kvm && echo kvm; test -e /dev/loop0 && echo loop; ls /dev",
    );
    for dev in ["kmsg\n", "kvm\n", "loop\n"] {
        assert!(
            !out.starts_with(dev) && !out.contains(&format!("\n{dev}")),
            "{out}"
        );
    }
    assert!(!Path::new(&s.env.path("home")).join("disk").exists());
}

#[test]
fn the_keyring_bpf_and_nested_namespaces_are_denied() {
    let Some(s) = boxed(
        "the_keyring_bpf_and_nested_namespaces_are_denied",
        "calls",
        &[],
    ) else {
        return;
    };
    let (_, out, _) = s.sh(
        "calls",
        "grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status | tr -s '\\t ' ' '",
    );
    assert_eq!(out, "NoNewPrivs: 1\nSeccomp: 2\n", "{out}");
    let (status, _, err) = s.sh("calls", "unshare -U -r -m sh -c 'mount -t tmpfs t /mnt'");
    assert_ne!(
        status, 0,
        "a nested user namespace with mount rights: {err}"
    );
    if !python(&s, "calls") {
        return;
    }
    // keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING), add_key, bpf(BPF_PROG_LOAD),
    // perf_event_open: each fails with EPERM.
    let script = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
nr = {"x86_64": {"keyctl": 250, "add_key": 248, "bpf": 321, "perf_event_open": 298, "unshare": 272},
      "aarch64": {"keyctl": 219, "add_key": 217, "bpf": 280, "perf_event_open": 241, "unshare": 97}}[os.uname().machine]
for name, args in [("keyctl", (0, -4)), ("add_key", (0, 0, 0, 0, 0)), ("bpf", (5, 0, 0)),
                   ("perf_event_open", (0, 0, -1, -1, 0)), ("unshare", (0x10000000,))]:
    r = libc.syscall(nr[name], *args)
    print(name, r, os.strerror(ctypes.get_errno()))
"#;
    let out = s.env.run(&["exec", "calls", "--", "python3", "-c", script]);
    let text = String::from_utf8_lossy(&out.stdout);
    for name in ["keyctl", "add_key", "bpf", "perf_event_open", "unshare"] {
        assert!(
            text.contains(&format!("{name} -1 Operation not permitted")),
            "{name}: {text}{}",
            stderr(&out)
        );
    }
}

#[test]
fn no_raw_sockets_on_the_host_network_and_no_terminal_injection() {
    let Some(s) = boxed(
        "no_raw_sockets_on_the_host_network_and_no_terminal_injection",
        "raw",
        &[],
    ) else {
        return;
    };
    if !python(&s, "raw") {
        return;
    }
    let script = r#"
import socket, fcntl, termios, pty, os
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); print("raw socket")
except PermissionError:
    print("no raw socket")
try:
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW); print("packet socket")
except PermissionError:
    print("no packet socket")
m, sl = pty.openpty()
try:
    fcntl.ioctl(sl, termios.TIOCSTI, b"x"); print("injected")
except PermissionError:
    print("no injection")
"#;
    let out = s.env.run(&["exec", "raw", "--", "python3", "-c", script]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "no raw socket\nno packet socket\nno injection\n",
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_rootless_box_gets_the_same_hardening() {
    let test = "a_rootless_box_gets_the_same_hardening";
    let Some(g) = GitBox::new(test, true) else {
        return;
    };
    // The user's own home, outside /home: hidden from the box.
    let user_home =
        std::path::PathBuf::from(format!("/var/tmp/agentbox-sec-home-{}", std::process::id()));
    write(&user_home.join("secret"), "the user's secret\n");
    crate::common::chown_nobody(&user_home);
    let nobody_home = g.nobody.clone().expect("rootless");
    let run = |script: &str| {
        let exe = nobody_home.join("agentbox");
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(&exe)
            .args(["exec", "g", "--", "sh", "-c", script])
            .env("AGENTBOX_HOME", &nobody_home)
            .env("HOME", &user_home)
            .current_dir("/")
            .output()
            .expect("setpriv");
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr(&out),
        )
    };
    g.ok(&["stop", "g"]);
    let (out, err) = run(&format!(
        "cat {}/secret 2>/dev/null && echo read-home;
         echo 1 > /proc/sys/kernel/sysrq 2>/dev/null && echo wrote-sysrq;
         mknod /tmp/disk b 7 0 2>/dev/null && echo made-device;
         cat /proc/keys 2>/dev/null | wc -c;
         command -v python3 >/dev/null && python3 -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); r = l.syscall(250, 0, -3, 0, 0, 0); print(\"keyctl\", r, ctypes.get_errno())';
         true",
        user_home.display()
    ));
    let _ = std::fs::remove_dir_all(&user_home);
    for bad in ["read-home", "wrote-sysrq", "made-device"] {
        assert!(!out.contains(bad), "{bad}: {out}{err}");
    }
    assert!(
        out.lines().any(|l| l.trim() == "0"),
        "/proc/keys is masked: {out}"
    );
    if let Some(k) = out.lines().find(|l| l.starts_with("keyctl")) {
        assert_eq!(k, "keyctl -1 1", "keyctl is refused with EPERM");
    }
}
