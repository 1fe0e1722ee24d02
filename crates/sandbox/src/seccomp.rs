//! The system-call filter every box process runs under: at least what Docker's default
//! profile denies to a container without `CAP_SYS_ADMIN`, built with `seccompiler`.
//!
//! Two filters are stacked (the kernel applies the most restrictive answer):
//! * [`denied`]: calls that reach kernel state shared with the host — the keyring
//!   (`keyctl`, `add_key`, `request_key`), BPF, perf events, module loading, `kexec`,
//!   mounting and namespaces (`mount`, the new mount API, `unshare`, `setns`, `clone` with a
//!   namespace flag, so no nested user namespace can regain mount rights), the clock, swap,
//!   quotas, `reboot`, raw I/O ports, cross-process memory access, `userfaultfd`, and the
//!   terminal-injection ioctls (`TIOCSTI`, `TIOCLINUX`: a box given the caller's terminal must
//!   not type into it) — fail with `EPERM`;
//! * `clone3` fails with `ENOSYS`, as under Docker: its flags live in memory a filter cannot
//!   read, and C libraries fall back to `clone`, whose flags the first filter checks.
//!
//! Everything else is allowed: the box is for running real toolchains.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Calls denied whatever their arguments.
const DENIED: &[i64] = &[
    libc::SYS_acct,
    libc::SYS_add_key,
    libc::SYS_bpf,
    libc::SYS_clock_adjtime,
    libc::SYS_clock_settime,
    libc::SYS_delete_module,
    libc::SYS_finit_module,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fsopen,
    libc::SYS_fspick,
    libc::SYS_init_module,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ioperm,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_iopl,
    libc::SYS_kexec_file_load,
    libc::SYS_kexec_load,
    libc::SYS_keyctl,
    libc::SYS_lookup_dcookie,
    libc::SYS_mount,
    libc::SYS_mount_setattr,
    libc::SYS_move_mount,
    libc::SYS_name_to_handle_at,
    libc::SYS_open_by_handle_at,
    libc::SYS_open_tree,
    libc::SYS_perf_event_open,
    libc::SYS_pivot_root,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_quotactl,
    libc::SYS_reboot,
    libc::SYS_request_key,
    libc::SYS_setns,
    libc::SYS_settimeofday,
    libc::SYS_swapoff,
    libc::SYS_swapon,
    libc::SYS_umount2,
    libc::SYS_unshare,
    libc::SYS_userfaultfd,
];

/// `clone` flags that make a namespace.
const NAMESPACE_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWCGROUP as u64,
];

/// Terminal ioctls that push input into a terminal or drive the console.
const DENIED_IOCTLS: &[u64] = &[libc::TIOCSTI, libc::TIOCLINUX];

fn arch() -> Result<TargetArch, String> {
    TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| format!("no system-call filter for this architecture: {e}"))
}

fn rule(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompRule, String> {
    let len = if matches!(op, SeccompCmpOp::MaskedEq(_)) || value > u32::MAX as u64 {
        SeccompCmpArgLen::Qword
    } else {
        SeccompCmpArgLen::Dword
    };
    SeccompCondition::new(arg, len, op, value)
        .and_then(|c| SeccompRule::new(vec![c]))
        .map_err(|e| format!("building the system-call filter: {e}"))
}

/// The filter denying [`DENIED`], namespace-making `clone`s and the terminal-injection
/// ioctls with `EPERM`.
pub fn denied() -> Result<BpfProgram, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|&nr| (nr, Vec::new())).collect();
    rules.insert(
        libc::SYS_clone,
        NAMESPACE_FLAGS
            .iter()
            .map(|&f| rule(0, SeccompCmpOp::MaskedEq(f), f))
            .collect::<Result<_, _>>()?,
    );
    rules.insert(
        libc::SYS_ioctl,
        DENIED_IOCTLS
            .iter()
            .map(|&req| rule(1, SeccompCmpOp::MaskedEq(0xffff_ffff), req))
            .collect::<Result<_, _>>()?,
    );
    compile(rules, libc::EPERM)
}

/// The filter making `clone3` fail with `ENOSYS` (see the module documentation).
pub fn no_clone3() -> Result<BpfProgram, String> {
    let rules = BTreeMap::from([(libc::SYS_clone3, Vec::new())]);
    compile(rules, libc::ENOSYS)
}

/// A filter that allows everything but what `rules` match, which fails with `errno`.
fn compile(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> Result<BpfProgram, String> {
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        arch()?,
    )
    .map_err(|e| format!("building the system-call filter: {e}"))?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| format!("compiling the system-call filter: {e}"))
}

/// Both filters, ready to install in a child before it runs a box command.
pub struct BoxFilters {
    pub denied: BpfProgram,
    pub no_clone3: BpfProgram,
}

impl BoxFilters {
    pub fn build() -> Result<BoxFilters, String> {
        Ok(BoxFilters {
            denied: denied()?,
            no_clone3: no_clone3()?,
        })
    }

    /// Install both in the calling thread (sets `no_new_privs` first). Allocation-free:
    /// safe in a child between `fork` and `exec`. Returns false when the kernel refused.
    pub fn install(&self) -> bool {
        seccompiler::apply_filter(&self.denied).is_ok()
            && seccompiler::apply_filter(&self.no_clone3).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filters_compile_for_this_machine() {
        let f = BoxFilters::build().expect("filters build");
        assert!(f.denied.len() > DENIED.len());
        assert!(!f.no_clone3.is_empty());
    }
}
