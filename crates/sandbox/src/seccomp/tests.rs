use super::*;

#[test]
fn the_filters_compile_for_this_machine() {
    let f = BoxFilters::build().expect("filters build");
    assert!(f.allowed.len() > ALLOWED.len());
    assert!(!f.unknown_enosys.is_empty());
}

#[test]
fn no_refused_call_is_on_the_allow_list() {
    for nr in NEVER {
        assert!(
            !ALLOWED.contains(nr) && !ALLOWED_ARCH.contains(nr),
            "call {nr} is both refused and allowed"
        );
        assert!(
            ![
                libc::SYS_clone,
                libc::SYS_socket,
                libc::SYS_personality,
                libc::SYS_ioctl
            ]
            .contains(nr),
            "call {nr} has argument rules"
        );
    }
    let mut all: Vec<i64> = ALLOWED.iter().chain(ALLOWED_ARCH).copied().collect();
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "a call is listed twice");
    assert!(all.iter().all(|&nr| (0..=LAST_KNOWN).contains(&nr)));
}

/// What one call must give under the filters.
#[derive(Clone, Copy, Debug)]
enum Want {
    /// Not refused by the filter (the kernel may still fail it, but not with the errnos a
    /// filter gives for these arguments).
    Passes,
    Errno(i32),
}

/// Installs the filters in a forked child, makes each call there and reports the first
/// one whose answer differs: seccomp needs no privilege, so this checks the real BPF.
#[test]
fn the_filters_answer_as_documented() {
    const HIGH: i64 = 1 << 32;
    let mut buf = [0u8; 8];
    let p = buf.as_mut_ptr() as i64;
    let cases: Vec<(&str, i64, [i64; 6], Want)> = vec![
        ("getpid", libc::SYS_getpid, [0; 6], Want::Passes),
        (
            "io_uring_setup",
            libc::SYS_io_uring_setup,
            [1, p, 0, 0, 0, 0],
            Want::Errno(libc::EPERM),
        ),
        (
            "io_uring_enter",
            libc::SYS_io_uring_enter,
            [-1, 0, 0, 0, 0, 0],
            Want::Errno(libc::EPERM),
        ),
        (
            "io_uring_register",
            libc::SYS_io_uring_register,
            [-1, 0, 0, 0, 0, 0],
            Want::Errno(libc::EPERM),
        ),
        (
            "kcmp",
            libc::SYS_kcmp,
            [0, 0, 0, 0, 0, 0],
            Want::Errno(libc::EPERM),
        ),
        (
            "set_mempolicy",
            libc::SYS_set_mempolicy,
            [0; 6],
            Want::Errno(libc::EPERM),
        ),
        ("mbind", libc::SYS_mbind, [0; 6], Want::Errno(libc::EPERM)),
        (
            "move_pages",
            libc::SYS_move_pages,
            [0; 6],
            Want::Errno(libc::EPERM),
        ),
        (
            "process_vm_readv",
            libc::SYS_process_vm_readv,
            [0; 6],
            Want::Errno(libc::EPERM),
        ),
        (
            "unshare",
            libc::SYS_unshare,
            [libc::CLONE_NEWUSER as i64, 0, 0, 0, 0, 0],
            Want::Errno(libc::EPERM),
        ),
        (
            "personality READ_IMPLIES_EXEC",
            libc::SYS_personality,
            [0x0040_0000, 0, 0, 0, 0, 0],
            Want::Errno(libc::EPERM),
        ),
        (
            "personality ADDR_NO_RANDOMIZE",
            libc::SYS_personality,
            [0x0004_0000, 0, 0, 0, 0, 0],
            Want::Errno(libc::EPERM),
        ),
        (
            "personality query",
            libc::SYS_personality,
            [0xffff_ffff, 0, 0, 0, 0, 0],
            Want::Passes,
        ),
        (
            "personality PER_LINUX",
            libc::SYS_personality,
            [0, 0, 0, 0, 0, 0],
            Want::Passes,
        ),
        (
            "socket AF_VSOCK",
            libc::SYS_socket,
            [40, libc::SOCK_STREAM as i64, 0, 0, 0, 0],
            Want::Errno(libc::EPERM),
        ),
        (
            "socket AF_VSOCK, high bits set",
            libc::SYS_socket,
            [HIGH | 40, libc::SOCK_STREAM as i64, 0, 0, 0, 0],
            Want::Errno(libc::EPERM),
        ),
        (
            "socket AF_UNIX",
            libc::SYS_socket,
            [libc::AF_UNIX as i64, libc::SOCK_STREAM as i64, 0, 0, 0, 0],
            Want::Passes,
        ),
        (
            "ioctl TIOCSTI",
            libc::SYS_ioctl,
            [0, libc::TIOCSTI as i64, p, 0, 0, 0],
            Want::Errno(libc::EPERM),
        ),
        (
            "ioctl TIOCSTI, high bits set",
            libc::SYS_ioctl,
            [0, HIGH | libc::TIOCSTI as i64, p, 0, 0, 0],
            Want::Errno(libc::EPERM),
        ),
        (
            "ioctl TIOCLINUX",
            libc::SYS_ioctl,
            [0, libc::TIOCLINUX as i64, p, 0, 0, 0],
            Want::Errno(libc::EPERM),
        ),
        (
            "ioctl FIONREAD",
            libc::SYS_ioctl,
            [-1, libc::FIONREAD as i64, p, 0, 0, 0],
            Want::Passes,
        ),
        (
            "clone3",
            libc::SYS_clone3,
            [0; 6],
            Want::Errno(libc::ENOSYS),
        ),
        (
            "a call newer than the filter",
            LAST_KNOWN + 1,
            [0; 6],
            Want::Errno(libc::ENOSYS),
        ),
        ("listmount", 458, [0; 6], Want::Errno(libc::EPERM)),
        (
            "clone with CLONE_NEWUSER",
            libc::SYS_clone,
            [(libc::CLONE_NEWUSER | libc::SIGCHLD) as i64, 0, 0, 0, 0, 0],
            Want::Errno(libc::EPERM),
        ),
    ];
    let filters = BoxFilters::build().expect("filters build");
    // SAFETY: the child makes only async-signal-safe calls (prctl, seccomp, the calls
    // under test, _exit) on memory prepared before the fork.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        unsafe {
            if !filters.install() {
                libc::_exit(200);
            }
            for (i, (_, nr, a, want)) in cases.iter().enumerate() {
                *libc::__errno_location() = 0;
                let r = libc::syscall(*nr, a[0], a[1], a[2], a[3], a[4], a[5]);
                if r == 0 && *nr == libc::SYS_clone {
                    libc::_exit(0); // the clone child: the filter let it through
                }
                let errno = *libc::__errno_location();
                let ok = match want {
                    Want::Passes => r >= 0 || (errno != libc::EPERM && errno != libc::ENOSYS),
                    Want::Errno(e) => r == -1 && errno == *e,
                };
                if !ok {
                    libc::_exit(i as i32 + 1);
                }
            }
            libc::_exit(0);
        }
    }
    let mut status = 0;
    // SAFETY: waiting for the child forked above.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFEXITED(status), "child died: {status:#x}");
    let code = libc::WEXITSTATUS(status);
    assert_ne!(code, 200, "the filters did not install");
    assert_eq!(
        code,
        0,
        "{:?} answered otherwise",
        cases.get((code as usize).wrapping_sub(1))
    );
}
