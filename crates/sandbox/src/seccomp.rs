//! The system-call filter every box process runs under: an allow-list modelled on Docker's
//! default profile for a container without `CAP_SYS_ADMIN`, stricter where agentbox was
//! already stricter, built with `seccompiler`.
//!
//! One file (over 600 lines): the policy is read as a whole when reviewing what a box may
//! call; most of its length is the commented tables [`ALLOWED`], [`ALLOWED_ARCH`] and
//! [`NEVER`], and the filters built from them are short.
//!
//! Two filters are stacked (the kernel applies the most restrictive answer):
//! * [`allowed`]: the calls of [`ALLOWED`] (and the architecture's own, [`ALLOWED_ARCH`])
//!   pass; a few pass only with safe arguments — `clone` without a namespace flag (no nested
//!   user namespace can regain mount rights), `socket` of any family but `AF_VSOCK` (vsock
//!   reaches the hypervisor's services and no network namespace isolates it), `personality`
//!   with one of Docker's five values (no `READ_IMPLIES_EXEC`, no `ADDR_NO_RANDOMIZE`), and
//!   `ioctl` but the terminal-injection requests (`TIOCSTI`, `TIOCLINUX`: a box given the
//!   caller's terminal must not type into it). Every other call fails with `EPERM`, as under
//!   Docker: the keyring, BPF, perf events, modules, `kexec`, mounting and namespaces, the
//!   clock, swap, quotas, `reboot`, raw I/O ports, cross-process memory access and
//!   comparison (`process_vm_*`, `kcmp`, `pidfd_getfd`, `process_madvise`), `userfaultfd`,
//!   `io_uring` (a large kernel attack surface that seccomp cannot see into), NUMA memory
//!   policy (`mbind`, `set_mempolicy`, `move_pages`, `migrate_pages`: Docker grants them only
//!   with `CAP_SYS_NICE`, which a box never has), file handles, `syslog`, host names.
//! * [`unknown_enosys`]: `clone3`, and any call numbered above the newest this filter knows
//!   ([`LAST_KNOWN`]), fail with `ENOSYS`. `clone3`'s flags live in memory a filter cannot
//!   read, and C libraries fall back to `clone`, whose flags the first filter checks; a call
//!   newer than this list is refused the way an older kernel would, so C libraries take their
//!   fallback instead of failing on `EPERM`.
//!
//! Stricter than Docker: `process_vm_readv`/`writev`, `name_to_handle_at` and
//! `clock_adjtime` are refused, as is `io_uring` (current Docker refuses it too), and the
//! `TIOCSTI`/`TIOCLINUX` ioctls.

use std::collections::BTreeMap;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

/// Calls newer than the `libc` crate's tables. From number 424 on, every architecture
/// shares one numbering, so these hold on x86_64 and aarch64 alike.
mod newer {
    pub const CACHESTAT: i64 = 451;
    pub const FCHMODAT2: i64 = 452;
    pub const MAP_SHADOW_STACK: i64 = 453;
    pub const FUTEX_WAKE: i64 = 454;
    pub const FUTEX_WAIT: i64 = 455;
    pub const FUTEX_REQUEUE: i64 = 456;
    /// `statmount`, `listmount` (457, 458): mount information — refused, as the rest of
    /// the mount API. `lsm_*` (459–461): refused, as Docker's profile does not list them.
    pub const MSEAL: i64 = 462;
    pub const SETXATTRAT: i64 = 463;
    pub const GETXATTRAT: i64 = 464;
    pub const LISTXATTRAT: i64 = 465;
    pub const REMOVEXATTRAT: i64 = 466;
    /// `open_tree_attr` (467): mount API, refused.
    pub const FILE_GETATTR: i64 = 468;
    pub const FILE_SETATTR: i64 = 469;
}

/// The newest call number this filter decides on; anything above fails with `ENOSYS`.
pub const LAST_KNOWN: i64 = newer::FILE_SETATTR;

/// Calls allowed whatever their arguments, on every architecture: Docker's default list
/// less what is refused above.
pub const ALLOWED: &[i64] = &[
    libc::SYS_accept,
    libc::SYS_accept4,
    libc::SYS_adjtimex,
    libc::SYS_bind,
    libc::SYS_brk,
    libc::SYS_capget,
    libc::SYS_capset,
    libc::SYS_chdir,
    // The box keeps CAP_SYS_CHROOT, as under Docker.
    libc::SYS_chroot,
    libc::SYS_clock_getres,
    libc::SYS_clock_gettime,
    libc::SYS_clock_nanosleep,
    libc::SYS_close,
    libc::SYS_close_range,
    libc::SYS_connect,
    libc::SYS_copy_file_range,
    libc::SYS_dup,
    libc::SYS_dup3,
    libc::SYS_epoll_create1,
    libc::SYS_epoll_ctl,
    libc::SYS_epoll_pwait,
    libc::SYS_epoll_pwait2,
    libc::SYS_eventfd2,
    libc::SYS_execve,
    libc::SYS_execveat,
    libc::SYS_exit,
    libc::SYS_exit_group,
    libc::SYS_faccessat,
    libc::SYS_faccessat2,
    libc::SYS_fadvise64,
    libc::SYS_fallocate,
    libc::SYS_fanotify_mark,
    libc::SYS_fchdir,
    libc::SYS_fchmod,
    libc::SYS_fchmodat,
    libc::SYS_fchown,
    libc::SYS_fchownat,
    libc::SYS_fcntl,
    libc::SYS_fdatasync,
    libc::SYS_fgetxattr,
    libc::SYS_flistxattr,
    libc::SYS_flock,
    libc::SYS_fremovexattr,
    libc::SYS_fsetxattr,
    libc::SYS_fstat,
    libc::SYS_fstatfs,
    libc::SYS_fsync,
    libc::SYS_ftruncate,
    libc::SYS_futex,
    libc::SYS_futex_waitv,
    libc::SYS_get_robust_list,
    libc::SYS_getcpu,
    libc::SYS_getcwd,
    libc::SYS_getdents64,
    libc::SYS_getegid,
    libc::SYS_geteuid,
    libc::SYS_getgid,
    libc::SYS_getgroups,
    libc::SYS_getitimer,
    libc::SYS_getpeername,
    libc::SYS_getpgid,
    libc::SYS_getpid,
    libc::SYS_getppid,
    libc::SYS_getpriority,
    libc::SYS_getrandom,
    libc::SYS_getresgid,
    libc::SYS_getresuid,
    libc::SYS_getrlimit,
    libc::SYS_getrusage,
    libc::SYS_getsid,
    libc::SYS_getsockname,
    libc::SYS_getsockopt,
    libc::SYS_gettid,
    libc::SYS_gettimeofday,
    libc::SYS_getuid,
    libc::SYS_getxattr,
    libc::SYS_inotify_add_watch,
    libc::SYS_inotify_init1,
    libc::SYS_inotify_rm_watch,
    libc::SYS_io_cancel,
    libc::SYS_io_destroy,
    libc::SYS_io_getevents,
    libc::SYS_io_setup,
    libc::SYS_io_submit,
    libc::SYS_ioprio_get,
    libc::SYS_ioprio_set,
    libc::SYS_kill,
    libc::SYS_landlock_add_rule,
    libc::SYS_landlock_create_ruleset,
    libc::SYS_landlock_restrict_self,
    libc::SYS_lgetxattr,
    libc::SYS_linkat,
    libc::SYS_listen,
    libc::SYS_listxattr,
    libc::SYS_llistxattr,
    libc::SYS_lremovexattr,
    libc::SYS_lseek,
    libc::SYS_lsetxattr,
    libc::SYS_madvise,
    libc::SYS_membarrier,
    libc::SYS_memfd_create,
    libc::SYS_memfd_secret,
    libc::SYS_mincore,
    libc::SYS_mkdirat,
    // Without CAP_MKNOD only FIFOs and sockets.
    libc::SYS_mknodat,
    libc::SYS_mlock,
    libc::SYS_mlock2,
    libc::SYS_mlockall,
    libc::SYS_mmap,
    libc::SYS_mprotect,
    libc::SYS_mq_getsetattr,
    libc::SYS_mq_notify,
    libc::SYS_mq_open,
    libc::SYS_mq_timedreceive,
    libc::SYS_mq_timedsend,
    libc::SYS_mq_unlink,
    libc::SYS_mremap,
    libc::SYS_msgctl,
    libc::SYS_msgget,
    libc::SYS_msgrcv,
    libc::SYS_msgsnd,
    libc::SYS_msync,
    libc::SYS_munlock,
    libc::SYS_munlockall,
    libc::SYS_munmap,
    libc::SYS_nanosleep,
    libc::SYS_newfstatat,
    libc::SYS_openat,
    libc::SYS_openat2,
    libc::SYS_pidfd_open,
    libc::SYS_pidfd_send_signal,
    libc::SYS_pipe2,
    libc::SYS_pkey_alloc,
    libc::SYS_pkey_free,
    libc::SYS_pkey_mprotect,
    libc::SYS_ppoll,
    libc::SYS_prctl,
    libc::SYS_pread64,
    libc::SYS_preadv,
    libc::SYS_preadv2,
    libc::SYS_prlimit64,
    libc::SYS_process_mrelease,
    libc::SYS_pselect6,
    // Debuggers and `strace` within the box (Docker allows it from kernel 4.8, whose
    // seccomp re-checks the traced call).
    libc::SYS_ptrace,
    libc::SYS_pwrite64,
    libc::SYS_pwritev,
    libc::SYS_pwritev2,
    libc::SYS_read,
    libc::SYS_readahead,
    libc::SYS_readlinkat,
    libc::SYS_readv,
    libc::SYS_recvfrom,
    libc::SYS_recvmmsg,
    libc::SYS_recvmsg,
    libc::SYS_remap_file_pages,
    libc::SYS_removexattr,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_restart_syscall,
    libc::SYS_rseq,
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigpending,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigqueueinfo,
    libc::SYS_rt_sigreturn,
    libc::SYS_rt_sigsuspend,
    libc::SYS_rt_sigtimedwait,
    libc::SYS_rt_tgsigqueueinfo,
    libc::SYS_sched_get_priority_max,
    libc::SYS_sched_get_priority_min,
    libc::SYS_sched_getaffinity,
    libc::SYS_sched_getattr,
    libc::SYS_sched_getparam,
    libc::SYS_sched_getscheduler,
    libc::SYS_sched_rr_get_interval,
    libc::SYS_sched_setaffinity,
    libc::SYS_sched_setattr,
    libc::SYS_sched_setparam,
    libc::SYS_sched_setscheduler,
    libc::SYS_sched_yield,
    // Only ever adds filters: a stacked filter cannot loosen this one.
    libc::SYS_seccomp,
    libc::SYS_semctl,
    libc::SYS_semget,
    libc::SYS_semop,
    libc::SYS_semtimedop,
    libc::SYS_sendfile,
    libc::SYS_sendmmsg,
    libc::SYS_sendmsg,
    libc::SYS_sendto,
    libc::SYS_set_robust_list,
    libc::SYS_set_tid_address,
    libc::SYS_setfsgid,
    libc::SYS_setfsuid,
    libc::SYS_setgid,
    libc::SYS_setgroups,
    libc::SYS_setitimer,
    libc::SYS_setpgid,
    libc::SYS_setpriority,
    libc::SYS_setregid,
    libc::SYS_setresgid,
    libc::SYS_setresuid,
    libc::SYS_setreuid,
    libc::SYS_setrlimit,
    libc::SYS_setsid,
    libc::SYS_setsockopt,
    libc::SYS_setuid,
    libc::SYS_setxattr,
    libc::SYS_shmat,
    libc::SYS_shmctl,
    libc::SYS_shmdt,
    libc::SYS_shmget,
    libc::SYS_shutdown,
    libc::SYS_sigaltstack,
    libc::SYS_signalfd4,
    libc::SYS_socketpair,
    libc::SYS_splice,
    libc::SYS_statfs,
    libc::SYS_statx,
    libc::SYS_symlinkat,
    libc::SYS_sync,
    libc::SYS_sync_file_range,
    libc::SYS_syncfs,
    libc::SYS_sysinfo,
    libc::SYS_tee,
    libc::SYS_tgkill,
    libc::SYS_timer_create,
    libc::SYS_timer_delete,
    libc::SYS_timer_getoverrun,
    libc::SYS_timer_gettime,
    libc::SYS_timer_settime,
    libc::SYS_timerfd_create,
    libc::SYS_timerfd_gettime,
    libc::SYS_timerfd_settime,
    libc::SYS_times,
    libc::SYS_tkill,
    libc::SYS_truncate,
    libc::SYS_umask,
    libc::SYS_uname,
    libc::SYS_unlinkat,
    libc::SYS_utimensat,
    libc::SYS_vmsplice,
    libc::SYS_wait4,
    libc::SYS_waitid,
    libc::SYS_write,
    libc::SYS_writev,
    // Newer than Docker's list, and no more than what an allowed call already does.
    newer::CACHESTAT,
    newer::FCHMODAT2,
    newer::MAP_SHADOW_STACK,
    newer::FUTEX_WAKE,
    newer::FUTEX_WAIT,
    newer::FUTEX_REQUEUE,
    newer::MSEAL,
    newer::SETXATTRAT,
    newer::GETXATTRAT,
    newer::LISTXATTRAT,
    newer::REMOVEXATTRAT,
    newer::FILE_GETATTR,
    newer::FILE_SETATTR,
];

/// The architecture's own calls: x86_64 keeps the pre-`*at` forms and its TLS calls.
#[cfg(target_arch = "x86_64")]
pub const ALLOWED_ARCH: &[i64] = &[
    libc::SYS_access,
    libc::SYS_alarm,
    libc::SYS_arch_prctl,
    libc::SYS_chmod,
    libc::SYS_chown,
    libc::SYS_creat,
    libc::SYS_dup2,
    libc::SYS_epoll_create,
    libc::SYS_epoll_ctl_old,
    libc::SYS_epoll_wait,
    libc::SYS_epoll_wait_old,
    libc::SYS_eventfd,
    libc::SYS_fork,
    libc::SYS_futimesat,
    libc::SYS_get_thread_area,
    libc::SYS_getdents,
    libc::SYS_getpgrp,
    libc::SYS_inotify_init,
    libc::SYS_lchown,
    libc::SYS_link,
    libc::SYS_lstat,
    libc::SYS_mkdir,
    libc::SYS_mknod,
    libc::SYS_modify_ldt,
    libc::SYS_open,
    libc::SYS_pause,
    libc::SYS_pipe,
    libc::SYS_poll,
    libc::SYS_readlink,
    libc::SYS_rename,
    libc::SYS_rmdir,
    libc::SYS_select,
    libc::SYS_set_thread_area,
    libc::SYS_signalfd,
    libc::SYS_stat,
    libc::SYS_symlink,
    libc::SYS_time,
    libc::SYS_unlink,
    libc::SYS_utime,
    libc::SYS_utimes,
    libc::SYS_vfork,
    // io_pgetevents (not in the libc crate's x86_64 table).
    333,
    // uretprobe: only the kernel's uretprobe trampoline can make it; refusing it would
    // crash a box process the host is probing.
    335,
];

/// The architecture's own calls: aarch64 has only the generic table.
#[cfg(target_arch = "aarch64")]
pub const ALLOWED_ARCH: &[i64] = &[
    // io_pgetevents (not in the libc crate's aarch64 table).
    292,
];

/// Calls that must never pass, whatever the list above says (checked by a test): what the
/// deny-list this filter replaced refused, and what the review found open.
pub const NEVER: &[i64] = &[
    libc::SYS_acct,
    libc::SYS_add_key,
    libc::SYS_bpf,
    libc::SYS_clock_adjtime,
    libc::SYS_clock_settime,
    libc::SYS_clone3,
    libc::SYS_delete_module,
    libc::SYS_finit_module,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fsopen,
    libc::SYS_fspick,
    libc::SYS_get_mempolicy,
    libc::SYS_init_module,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ioperm,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_iopl,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_io_uring_setup,
    libc::SYS_kcmp,
    libc::SYS_kexec_file_load,
    libc::SYS_kexec_load,
    libc::SYS_keyctl,
    libc::SYS_lookup_dcookie,
    libc::SYS_mbind,
    libc::SYS_migrate_pages,
    libc::SYS_mount,
    libc::SYS_mount_setattr,
    libc::SYS_move_mount,
    libc::SYS_move_pages,
    libc::SYS_name_to_handle_at,
    libc::SYS_open_by_handle_at,
    libc::SYS_open_tree,
    libc::SYS_perf_event_open,
    libc::SYS_pidfd_getfd,
    libc::SYS_pivot_root,
    libc::SYS_process_madvise,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_quotactl,
    libc::SYS_reboot,
    libc::SYS_request_key,
    libc::SYS_set_mempolicy,
    libc::SYS_set_mempolicy_home_node,
    libc::SYS_setdomainname,
    libc::SYS_sethostname,
    libc::SYS_setns,
    libc::SYS_settimeofday,
    libc::SYS_swapoff,
    libc::SYS_swapon,
    libc::SYS_syslog,
    libc::SYS_umount2,
    libc::SYS_unshare,
    libc::SYS_userfaultfd,
    libc::SYS_vhangup,
    // statmount, listmount, the lsm_* calls, open_tree_attr.
    457,
    458,
    459,
    460,
    461,
    467,
];

/// `clone` flags that make a namespace (Docker's mask 0x7E020000).
const NAMESPACE_FLAGS: u64 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWCGROUP) as u64;

/// The `personality` values Docker allows: `PER_LINUX`, `PER_LINUX32`, each with
/// `UNAME26`, and the query `0xffffffff`.
pub const PERSONALITIES: &[u64] = &[0x0, 0x8, 0x20000, 0x20008, 0xffff_ffff];

/// The socket family no network namespace isolates.
const AF_VSOCK: u64 = 40;

/// Terminal ioctls that push input into a terminal or drive the console.
const DENIED_IOCTLS: &[u64] = &[libc::TIOCSTI, libc::TIOCLINUX];

fn arch() -> Result<TargetArch, String> {
    TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| format!("no system-call filter for this architecture: {e}"))
}

/// One condition on argument `arg`. `Dword` compares the low 32 bits only, which is what
/// the kernel reads of an `int`/`unsigned int` argument (so high garbage cannot dodge it).
fn cond(
    arg: u8,
    len: SeccompCmpArgLen,
    op: SeccompCmpOp,
    value: u64,
) -> Result<SeccompCondition, String> {
    SeccompCondition::new(arg, len, op, value)
        .map_err(|e| format!("building the system-call filter: {e}"))
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
    SeccompRule::new(conditions).map_err(|e| format!("building the system-call filter: {e}"))
}

/// The allow-list filter: [`ALLOWED`], [`ALLOWED_ARCH`] and `clone3` (refused by
/// [`unknown_enosys`] with the errno C libraries expect) pass; `clone`, `socket`,
/// `personality` and `ioctl` pass with safe arguments only; everything else fails with
/// `EPERM`.
pub fn allowed() -> Result<BpfProgram, String> {
    use SeccompCmpArgLen::{Dword, Qword};
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = ALLOWED
        .iter()
        .chain(ALLOWED_ARCH)
        .chain(&[libc::SYS_clone3])
        .map(|&nr| (nr, Vec::new()))
        .collect();
    rules.insert(
        libc::SYS_clone,
        vec![rule(vec![cond(
            0,
            Qword,
            SeccompCmpOp::MaskedEq(NAMESPACE_FLAGS),
            0,
        )?])?],
    );
    rules.insert(
        libc::SYS_socket,
        vec![rule(vec![cond(0, Dword, SeccompCmpOp::Ne, AF_VSOCK)?])?],
    );
    rules.insert(
        libc::SYS_personality,
        PERSONALITIES
            .iter()
            .map(|&p| rule(vec![cond(0, Dword, SeccompCmpOp::Eq, p)?]))
            .collect::<Result<_, _>>()?,
    );
    rules.insert(
        libc::SYS_ioctl,
        vec![rule(
            DENIED_IOCTLS
                .iter()
                .map(|&req| cond(1, Dword, SeccompCmpOp::Ne, req))
                .collect::<Result<_, _>>()?,
        )?],
    );
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Errno(libc::EPERM as u32),
        SeccompAction::Allow,
        arch()?,
    )
    .map_err(|e| format!("building the system-call filter: {e}"))?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| format!("compiling the system-call filter: {e}"))
}

/// The audit architecture of the running kernel's native calls (`linux/audit.h`).
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// The `ENOSYS` filter (see the module documentation), written as BPF directly because
/// `seccompiler` matches call numbers one by one, not ranges. A call of another
/// architecture kills the process, as in the first filter.
pub fn unknown_enosys() -> BpfProgram {
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const JGT_K: u16 = 0x25; // BPF_JMP | BPF_JGT | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const NR_OFFSET: u32 = 0; // seccomp_data.nr
    const ARCH_OFFSET: u32 = 4; // seccomp_data.arch
    let ins = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    vec![
        ins(LD_W_ABS, 0, 0, ARCH_OFFSET),
        ins(JEQ_K, 1, 0, AUDIT_ARCH),
        ins(RET_K, 0, 0, libc::SECCOMP_RET_KILL_PROCESS),
        ins(LD_W_ABS, 0, 0, NR_OFFSET),
        ins(JEQ_K, 2, 0, libc::SYS_clone3 as u32),
        // Unsigned: x32 calls (bit 30 set) land here too; the first filter refuses them.
        ins(JGT_K, 1, 0, LAST_KNOWN as u32),
        ins(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
        ins(
            RET_K,
            0,
            0,
            libc::SECCOMP_RET_ERRNO | (libc::ENOSYS as u32 & libc::SECCOMP_RET_DATA),
        ),
    ]
}

/// Both filters, ready to install in a child before it runs a box command.
pub struct BoxFilters {
    pub allowed: BpfProgram,
    pub unknown_enosys: BpfProgram,
}

impl BoxFilters {
    pub fn build() -> Result<BoxFilters, String> {
        Ok(BoxFilters {
            allowed: allowed()?,
            unknown_enosys: unknown_enosys(),
        })
    }

    /// Install both in the calling thread (sets `no_new_privs` first). Allocation-free:
    /// safe in a child between `fork` and `exec`. Returns false when the kernel refused.
    pub fn install(&self) -> bool {
        seccompiler::apply_filter(&self.allowed).is_ok()
            && seccompiler::apply_filter(&self.unknown_enosys).is_ok()
    }
}

#[cfg(test)]
mod tests;
