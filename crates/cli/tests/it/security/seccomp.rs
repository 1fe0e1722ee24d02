//! The system-call filter is an allow-list at least as strict as Docker's default profile:
//! the calls the review found open under the old deny-list (`io_uring`, `kcmp`, NUMA memory
//! policy, `personality` beyond Docker's five values, `socket(AF_VSOCK)`) fail with `EPERM`,
//! while what real work needs still runs.

use super::{boxed, python, GitBox};
use crate::common::stderr;

/// Makes each call with ctypes and prints `name result` (`-errno` on failure).
const ATTACK: &str = r#"
import ctypes, os, socket, subprocess, threading
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
nr = {"x86_64": {"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
                 "kcmp": 312, "set_mempolicy": 238, "mbind": 237, "get_mempolicy": 239,
                 "move_pages": 279, "personality": 135, "socket": 41},
      "aarch64": {"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
                  "kcmp": 272, "set_mempolicy": 237, "mbind": 235, "get_mempolicy": 236,
                  "move_pages": 239, "personality": 92, "socket": 198}}[os.uname().machine]
params = ctypes.create_string_buffer(120)
def call(label, name, *args):
    ctypes.set_errno(0)
    r = libc.syscall(nr[name], *[ctypes.c_long(a) for a in args])
    print(label, r if r >= 0 else -ctypes.get_errno(), flush=True)
pid = os.getpid()
call("io_uring_setup", "io_uring_setup", 1, ctypes.addressof(params))
call("io_uring_enter", "io_uring_enter", 0, 0, 0, 0, 0, 0)
call("io_uring_register", "io_uring_register", 0, 0, 0, 0)
call("kcmp", "kcmp", pid, pid, 0, 0, 0)
call("set_mempolicy", "set_mempolicy", 0, 0, 0)
call("mbind", "mbind", 0, 0, 0, 0, 0, 0)
call("get_mempolicy", "get_mempolicy", 0, 0, 0, 0, 0)
call("move_pages", "move_pages", 0, 0, 0, 0, 0, 0)
call("personality_read_implies_exec", "personality", 0x0400000)
call("personality_addr_no_randomize", "personality", 0x0040000)
call("socket_vsock", "socket", socket.AF_VSOCK, socket.SOCK_STREAM, 0)
call("socket_vsock_high_bits", "socket", (1 << 32) | socket.AF_VSOCK, socket.SOCK_STREAM, 0)
try:
    s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect((socket.VMADDR_CID_HOST, 22))
    print("vsock_connect 0")
except OSError as e:
    print("vsock_connect", -e.errno)
# What real programs do: still allowed.
call("personality_query", "personality", 0xffffffff)
call("personality_linux", "personality", 0)
call("socket_inet", "socket", socket.AF_INET, socket.SOCK_STREAM, 0)
t = threading.Thread(target=lambda: None); t.start(); t.join()
print("subprocess", subprocess.run(["true"]).returncode)
"#;

/// The calls that must fail, and the answers that count as refused (EPERM; ENOSYS).
const REFUSED: &[&str] = &[
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "kcmp",
    "set_mempolicy",
    "mbind",
    "get_mempolicy",
    "move_pages",
    "personality_read_implies_exec",
    "personality_addr_no_randomize",
    "socket_vsock",
    "socket_vsock_high_bits",
    "vsock_connect",
];

fn check(out: &str, err: &str) {
    let answer = |label: &str| -> i64 {
        out.lines()
            .find_map(|l| {
                l.strip_prefix(label)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse()
                    .ok()
            })
            .unwrap_or_else(|| panic!("{label}: no answer in {out}{err}"))
    };
    for label in REFUSED {
        let r = answer(label);
        assert!(
            r == -i64::from(libc::EPERM) || r == -i64::from(libc::ENOSYS),
            "{label} answered {r}, not EPERM/ENOSYS: {out}{err}"
        );
    }
    assert!(answer("personality_query") >= 0, "{out}{err}");
    assert_eq!(answer("personality_linux"), 0, "{out}{err}");
    assert!(answer("socket_inet") >= 0, "{out}{err}");
    assert_eq!(answer("subprocess"), 0, "{out}{err}");
}

#[test]
fn calls_beyond_dockers_profile_are_refused() {
    let Some(s) = boxed("calls_beyond_dockers_profile_are_refused", "sc", &[]) else {
        return;
    };
    // Ordinary work first: a shell, git, a toolchain's own threads and children.
    let (status, out, err) = s.sh(
        "sc",
        "cd /workspace && ls >/dev/null && git status >/dev/null 2>&1; echo sh-ok",
    );
    assert_eq!((status, out.as_str()), (0, "sh-ok\n"), "{err}");
    if !python(&s, "sc") {
        return;
    }
    let out = s.env.run(&["exec", "sc", "--", "python3", "-c", ATTACK]);
    check(&String::from_utf8_lossy(&out.stdout), &stderr(&out));
}

#[test]
fn calls_beyond_dockers_profile_are_refused_rootless() {
    let Some(g) = GitBox::new("calls_beyond_dockers_profile_are_refused_rootless", true) else {
        return;
    };
    assert_eq!(g.sh("git status >/dev/null && echo sh-ok"), "sh-ok\n");
    if crate::common::code(&g.run(&["exec", "g", "--", "sh", "-c", "command -v python3"]))
        != Some(0)
    {
        agentbox_testkit::tier::skip("python3 in the box", "python3 is not installed");
        return;
    }
    let out = g.run(&["exec", "g", "--", "python3", "-c", ATTACK]);
    check(&String::from_utf8_lossy(&out.stdout), &stderr(&out));
}
