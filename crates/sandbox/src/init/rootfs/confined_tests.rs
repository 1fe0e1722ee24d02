//! PID 1 acts as host root (or the host user) while it builds the box's root: the plan
//! against a recording kernel that resolves symlinks as the real one does, with a box that
//! planted symlinks in its layer and in the shared directory bound read-write into it.

use super::tests::{built, host, mounts_at, p, r, rootless, rootless_host, spec, ROOT};
use super::*;
use crate::init::kernel::recording::{Op, Recording};
use crate::init::kernel::Kind;

const AGENT_HOME: &str = "/run/agentbox/agent-home";

/// `spec()` with the shared agent copy bound read-write, as every box has it.
fn with_agent_home(spec: BoxSpec) -> BoxSpec {
    let mut s = spec;
    s.binds.push(Bind {
        src: p("/home/alice/.agentbox/agent-home"),
        dst: p(AGENT_HOME),
        readonly: false,
    });
    s
}

/// A host whose `/tmp` the attack aims at, with the box's shared copy holding `x`, an
/// absolute symlink to a host path (what the bind shows in the box's tree).
fn planted(rec: Recording) -> Recording {
    rec.dir("/home/alice/.agentbox/agent-home")
        .dir("/tmp/victim")
        .file("/tmp/victim/existing", "host data\n")
        .symlink(&format!("{ROOT}{AGENT_HOME}/x"), "/tmp/victim/pwned")
        .symlink(&format!("{ROOT}{AGENT_HOME}/y"), "/tmp/victim/existing")
}

fn host_untouched(rec: &Recording) {
    assert_eq!(rec.kind("/tmp/victim/pwned"), None, "no host file is made");
    assert_eq!(
        rec.content("/tmp/victim/existing"),
        Some(&b"host data\n"[..]),
        "no host file is changed"
    );
}

#[test]
fn the_root_is_confined_before_anything_is_put_below_it() {
    for (what, spec, mut rec) in [
        ("root", spec(), host()),
        ("rootless", rootless(), rootless_host()),
    ] {
        built(&mut rec, &spec);
        let confined = rec
            .ops()
            .iter()
            .position(|op| *op == Op::Confine(p(ROOT)))
            .unwrap_or_else(|| panic!("{what}: the root is confined"));
        let below = rec
            .ops()
            .iter()
            .position(|op| {
                op.target()
                    .is_some_and(|t| t.starts_with(ROOT) && t != p(ROOT))
            })
            .expect("something is put below the root");
        assert!(
            confined < below,
            "{what}: confined before anything below it"
        );
        if spec.rootless {
            // Its upper directory is written before the overlay is mounted.
            assert!(rec.ops().contains(&Op::Confine(spec.upper.clone())));
        }
    }
}

/// The attack: `/etc/resolv.conf` in the box's layer points into the shared copy,
/// where a symlink points to a host path. On the host's network and on a private one, by
/// absolute and relative spelling, PID 1 neither makes nor changes the host file, and the
/// box still starts.
#[test]
fn a_resolver_symlink_through_the_shared_copy_writes_no_host_file() {
    for network in [Network::Host, Network::Private] {
        for (link, via) in [
            ("/run/agentbox/agent-home/x", "absolute"),
            ("../run/agentbox/agent-home/x", "relative"),
            ("/run/agentbox/agent-home/y", "to an existing file"),
        ] {
            let spec = with_agent_home(BoxSpec { network, ..spec() });
            let mut rec = planted(host()).symlink(&format!("{ROOT}/etc/resolv.conf"), link);
            built(&mut rec, &spec);
            host_untouched(&rec);
            assert!(
                !rec.ops().iter().any(|op| matches!(op,
                    Op::WriteFile { path, .. } if path.starts_with(r(&AGENT_HOME[1..])))),
                "{network:?}, {via}: nothing is written in the shared copy"
            );
            if network == Network::Private {
                // The box's resolver is a bind of a private copy on its own file.
                assert_eq!(
                    rec.kind(&format!("{ROOT}/etc/resolv.conf")),
                    Some(Kind::File)
                );
            }
        }
    }
}

/// With a base that is an image, the host's `/etc/hosts` and `/etc/resolv.conf` are bound
/// into the box's `/etc`: a box whose `/etc` is a symlink to a host directory fails to
/// start rather than have a file made there.
#[test]
fn a_symlinked_directory_above_a_name_service_file_stops_the_box_not_the_host() {
    let image = BoxSpec {
        base: p("/home/alice/.agentbox/images/alpine/rootfs"),
        hide: Vec::new(),
        ..with_agent_home(spec())
    };
    let mut rec = planted(host())
        .dir("/home/alice/.agentbox/images/alpine/rootfs")
        .symlink(&format!("{ROOT}/etc"), "/tmp/victim");
    let e = setup_root(&mut rec, &image, None).expect_err("the box does not start");
    assert!(e.contains("symbolic links"), "{e}");
    assert_eq!(rec.kind("/tmp/victim/hosts"), None);
    assert_eq!(rec.kind("/tmp/victim/resolv.conf"), None);
    host_untouched(&rec);
}

/// A bind target below a directory the box controls (nested in the shared copy) whose
/// parent the box made a symlink: the target is not made through it.
#[test]
fn a_bind_target_below_a_planted_symlink_is_refused() {
    let mut spec = with_agent_home(spec());
    spec.binds.push(Bind {
        src: p("/opt/tools"),
        dst: p("/run/agentbox/agent-home/d/tools"),
        readonly: true,
    });
    let mut rec = planted(host()).symlink(&format!("{ROOT}{AGENT_HOME}/d"), "/tmp/victim");
    let e = setup_root(&mut rec, &spec, None).expect_err("the box does not start");
    assert!(e.contains("symbolic links"), "{e}");
    assert_eq!(
        rec.kind("/tmp/victim/tools"),
        None,
        "no host directory is made"
    );
    host_untouched(&rec);
}

/// A rootless box on a private network: the same resolver attack, as the host user.
#[test]
fn a_rootless_resolver_symlink_writes_no_host_file() {
    let spec = with_agent_home(BoxSpec {
        network: Network::Private,
        ..rootless()
    });
    let mut rec = planted(rootless_host()).symlink(
        &format!("{ROOT}/etc/resolv.conf"),
        "/run/agentbox/agent-home/x",
    );
    built(&mut rec, &spec);
    host_untouched(&rec);
}

/// A rootless box's hidden path through one of the host's symlinks (`/var/spool/mail ->
/// ../mail` on Debian) is hidden where the host has it, not refused for the symlink.
#[test]
fn a_rootless_hidden_path_through_a_host_symlink_is_hidden_at_its_real_place() {
    let spec = BoxSpec {
        hide: vec![p("/var/spool/mail")],
        ..rootless()
    };
    let mut rec = rootless_host()
        .dir("/var/mail")
        .symlink("/var/spool/mail", "../mail")
        .dir(&format!("{ROOT}/var/mail"))
        .symlink(&format!("{ROOT}/var/spool/mail"), "../mail");
    built(&mut rec, &spec);
    assert!(rec.ops().iter().any(|op| matches!(op,
        Op::Mount { target, fstype, .. } if *target == r("var/mail") && fstype == "tmpfs")));
}

/// Not about symlinks, but about what PID 1 mounts in the box's `/sys`: the host's energy
/// counters (`powercap`, RAPL) are masked as Docker masks them, on a fresh sysfs and on
/// the host's bound one alike.
#[test]
fn the_hosts_energy_counters_are_masked() {
    let powercap = "sys/devices/virtual/powercap";
    for (spec, rec) in [
        (spec(), host()),
        (rootless(), rootless_host()),
        (
            BoxSpec {
                network: Network::Private,
                ..rootless()
            },
            rootless_host(),
        ),
    ] {
        let mut rec = rec.dir(&format!("{ROOT}/{powercap}"));
        built(&mut rec, &spec);
        assert!(
            rec.ops().iter().any(|op| matches!(op,
                Op::Mount { target, fstype, flags, .. }
                    if *target == r(powercap) && fstype == "tmpfs"
                        && flags.contains(MountFlags::RDONLY))),
            "{:?}",
            mounts_at(&rec, &r(powercap))
        );
    }
}
