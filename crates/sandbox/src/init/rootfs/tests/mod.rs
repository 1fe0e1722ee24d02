//! The rootfs plan, built against a recording kernel (tier 0: no root, nothing mounted).
//!
//! Each test builds a box's root for a representative spec on a pretended host and asserts
//! one property of the recorded calls; see the module's doc for the invariants.

//!
//! This file holds the pretended host, the specs and the helpers that read the recording;
//! the tests are grouped by area in the submodules.

use super::*;
use crate::idmap::BoxUserNs;
use crate::init::kernel::recording::{Op, Recording};
use crate::init::kernel::Kind;
use crate::proto::IdRange;

mod binds;
mod hiding;
mod idmap;
mod kernel_fs;
mod mount_order;
mod resolver;

pub(super) const LOWER_TOP: &str = "/home/alice/.agentbox/store/n2";
pub(super) const LOWER: &str = "/home/alice/.agentbox/store/n1";
pub(super) const UPPER: &str = "/home/alice/.agentbox/boxes/b1/upper";
pub(super) const WORK: &str = "/home/alice/.agentbox/boxes/b1/work";
pub(super) const SCRATCH: &str = "/home/alice/.agentbox/boxes/b1/scratch";
pub(super) const ROOT: &str = "/home/alice/.agentbox/boxes/b1/scratch/r";
const RELAY: &str = "/home/alice/.agentbox/boxes/b1/relay.sock";
const HOST_RESOLV: &str = "search corp.example\nnameserver 192.0.2.53\n";

pub(super) fn p(s: &str) -> PathBuf {
    PathBuf::from(s)
}

/// `ROOT` joined with `rel`.
pub(super) fn r(rel: &str) -> PathBuf {
    Path::new(ROOT).join(rel)
}

/// A root box on the host's `/` and network, hiding what the host's data and secrets
/// lists would (homes, `/root`, a container engine's state, a secret file, one path below
/// another hidden one, one that does not exist), with a read-write and a read-only bind.
pub(super) fn spec() -> BoxSpec {
    BoxSpec {
        hostname: "b1".into(),
        base: p("/"),
        lowers: vec![p(LOWER_TOP), p(LOWER)],
        upper: p(UPPER),
        workdir: p(WORK),
        scratch: p(SCRATCH),
        hide: [
            "/home",
            "/root",
            "/var/lib/docker",
            "/etc/shadow",
            "/srv/x/secret.key",
            "/home/alice/.ssh",
            "/nonexistent",
        ]
        .map(p)
        .to_vec(),
        show: Vec::new(),
        network: Network::Host,
        binds: vec![
            Bind {
                src: p(RELAY),
                dst: p("/run/agentbox/relay.sock"),
                readonly: false,
            },
            Bind {
                src: p("/opt/tools"),
                dst: p("/run/agentbox/tools"),
                readonly: true,
            },
        ],
        rootless: false,
        tmpfs: TmpfsSizes {
            tmp: 1 << 30,
            run: 64 << 20,
            shm: 1 << 29,
        },
        ids: None,
    }
}

/// A rootless box: no hidden home or `/root` (its own), the host's directories bound.
pub(super) fn rootless() -> BoxSpec {
    BoxSpec {
        rootless: true,
        hide: ["/var/lib/docker", "/etc/shadow", "/nonexistent"]
            .map(p)
            .to_vec(),
        ..spec()
    }
}

/// The host `spec()` runs on, and what the box's fresh `/proc` and `/sys` show: some of
/// the knobs and host-state files exist, some (`irq`, `bus`, `fs`, `keys`, `scsi`, …) not.
pub(super) fn host() -> Recording {
    let mut rec = Recording::new()
        .dir(LOWER_TOP)
        .dir(LOWER)
        .dir(UPPER)
        .dir(WORK)
        .dir_owned("/home/alice", 1000, 1000, 0o700)
        .dir("/home/alice/.ssh")
        .file(RELAY, "")
        .dir_owned("/root", 0, 0, 0o700)
        .dir_owned("/var/lib/docker", 0, 0, 0o710)
        .dir_owned("/srv/x", 1000, 1000, 0o750)
        .file("/srv/x/secret.key", "k")
        .file("/etc/shadow", "root:*:")
        .file("/etc/resolv.conf", HOST_RESOLV)
        .file("/etc/hosts", "127.0.0.1 localhost\n")
        .dir("/usr/bin")
        .dir("/opt/tools")
        .dir("/sys")
        .symlink("/bin", "usr/bin")
        .dir("/lost+found")
        .dir("/tmp")
        .dir(&format!("{ROOT}/proc/sys"))
        .file(&format!("{ROOT}/proc/sysrq-trigger"), "")
        .file(&format!("{ROOT}/proc/kcore"), "")
        .file(&format!("{ROOT}/proc/kmsg"), "")
        .dir(&format!("{ROOT}/proc/acpi"))
        .dir(&format!("{ROOT}/sys/firmware"));
    // More than the box gets: raw memory, the kernel's log, a disk.
    for d in [
        "null", "zero", "full", "random", "urandom", "tty", "mem", "kmsg", "sda",
    ] {
        rec = rec.file(&format!("/dev/{d}"), "");
    }
    rec
}

/// A rootless box's host: its first layer's skeleton shows in the box's root (`usr`,
/// `etc`, but not `opt`: a directory the host made after the box's layer was).
pub(super) fn rootless_host() -> Recording {
    host()
        .dir(&format!("{ROOT}/usr"))
        .dir(&format!("{ROOT}/etc"))
}

pub(super) fn build(rec: &mut Recording, spec: &BoxSpec) -> Result<bool, String> {
    if spec.rootless {
        setup_root_rootless(rec, spec).map(|()| false)
    } else {
        setup_root(rec, spec, None)
    }
}

pub(super) fn built(rec: &mut Recording, spec: &BoxSpec) {
    build(rec, spec).expect("the box's root is built");
    assert_eq!(rec.refused(), Vec::<&Op>::new(), "no call failed");
}

fn stand_in() -> BoxUserNs {
    BoxUserNs::stand_in(IdRange {
        uid: 0x7000_0000,
        gid: 0x7000_0000,
        count: 65536,
    })
}

/// Index of the first recorded call `f` holds for.
pub(super) fn first(rec: &Recording, what: &str, f: impl Fn(&Op) -> bool) -> usize {
    rec.ops()
        .iter()
        .position(f)
        .unwrap_or_else(|| panic!("no call {what} in {:#?}", rec.ops()))
}

pub(super) fn is_mount_of(op: &Op, fs: &str, at: &Path) -> bool {
    matches!(op, Op::Mount { fstype, target, .. } if fstype == fs && target == at)
}

/// The options of the overlay mounted at `at`.
pub(super) fn overlay_data(rec: &Recording, at: &Path) -> String {
    rec.ops()
        .iter()
        .find_map(|op| match op {
            Op::Mount {
                fstype,
                target,
                data,
                ..
            } if fstype == "overlay" && target == at => Some(data.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no overlay at {}", at.display()))
}

/// The mount-table changes made at `at`, in order.
pub(super) fn mounts_at<'a>(rec: &'a Recording, at: &Path) -> Vec<&'a Op> {
    rec.ops()
        .iter()
        .filter(|op| op.is_mount() && op.target() == Some(at))
        .collect()
}

const KNOB_FLAGS: MountFlags = MountFlags::BIND
    .union(MountFlags::RDONLY)
    .union(MountFlags::NOSUID)
    .union(MountFlags::NODEV)
    .union(MountFlags::NOEXEC);
