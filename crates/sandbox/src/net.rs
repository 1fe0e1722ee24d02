//! A box's private network (`--network private`): the box's own network namespace, joined
//! to the outside by `pasta` (the passt project's user-mode TCP/IP stack), which the
//! supervisor starts once the box's PID 1 is ready and kills with the box.
//!
//! What the box sees: an interface `eth0` with [`BOX_ADDRESS`], a default route through
//! [`GATEWAY`] and a name server at [`DNS`]. Every connection the box opens leaves as an
//! ordinary socket of the `pasta` process on the host, so the box reaches what the host
//! reaches *except* the host's loopback: the gateway is not mapped to the host
//! (`--no-map-gw`), no port of the host's loopback is forwarded into the box (`-T none
//! -U none`), and the only exception is DNS, which `pasta` forwards from [`DNS`] to the
//! host's first name server (`--dns-forward`). Host abstract unix sockets belong to the
//! host's network namespace, which the box is not in. Published ports (`-t`) are the only
//! way in.
//!
//! Invariant: a [`Pasta`] is a child of the thread that started it, with a parent-death
//! signal, so a killed supervisor never leaves it behind.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// The box's address on its private network.
pub const BOX_ADDRESS: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 100);
/// Prefix length of the box's private network.
pub const PREFIX_LEN: u8 = 24;
/// The box's default gateway (`pasta` answers for it; it is not the host).
pub const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
/// The box's name server: `pasta` forwards DNS sent here to the host's first name server.
pub const DNS: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 3);

/// The program that joins a box's network to the outside.
pub const PASTA: &str = "pasta";

/// How long `pasta` may take to configure the box's interface.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("{what} needs `pasta` (a user-mode network stack) for a private network, and it is not on PATH ({path})")]
    PastaMissing { what: String, path: String },
    #[error("{what} cannot have a private network without root: pasta opens {TUN_PATH} as you, and {}", tun_why(.mode))]
    TunDenied { what: String, mode: Option<u32> },
    #[error("--publish {spec:?}: {why}")]
    BadPublish { spec: String, why: String },
    #[error("box {box_name:?} cannot publish host port {port}: {addr} is already in use")]
    PortTaken {
        box_name: String,
        port: u16,
        addr: SocketAddrV4,
    },
    #[error("box {box_name:?} cannot publish host port {port} ({addr}): {source}")]
    PortUnavailable {
        box_name: String,
        port: u16,
        addr: SocketAddrV4,
        source: std::io::Error,
    },
    #[error("box {box_name:?}: starting {} failed: {source}", pasta.display())]
    Spawn {
        box_name: String,
        pasta: PathBuf,
        source: std::io::Error,
    },
    #[error("box {box_name:?}: pasta could not attach the box's private network{}: {message}", if *rootless { " (rootless)" } else { "" })]
    Attach {
        box_name: String,
        rootless: bool,
        message: String,
    },
    #[error("box {box_name:?}: {}: {source}", path.display())]
    Io {
        box_name: String,
        path: PathBuf,
        source: std::io::Error,
    },
}

impl NetError {
    /// The stable exit-code class: a missing program is a missing capability (6), a taken
    /// port a conflict (4), a bad `--publish` bad usage (2).
    /// The exit-code class of the error (see [`agentbox_core::exit::ExitCode`]).
    pub fn exit_code(&self) -> i32 {
        use agentbox_core::exit::ExitCode;
        match self {
            NetError::PastaMissing { .. } | NetError::TunDenied { .. } => {
                ExitCode::NeedsRoot.into()
            }
            NetError::PortTaken { .. } => ExitCode::Refused.into(),
            NetError::BadPublish { .. } => ExitCode::Usage.into(),
            _ => ExitCode::Failure.into(),
        }
    }

    /// What the user can do about it.
    pub fn hint(&self) -> Option<String> {
        match self {
            NetError::PastaMissing { .. } => Some(
                "install it (`apt-get install passt`, `dnf install passt`), or use --network host or none".into(),
            ),
            NetError::TunDenied { .. } => Some(format!(
                "make it usable by everyone as most systems have it (`sudo chmod 0666 {TUN_PATH}`), run the box as root, or use --network none"
            )),
            NetError::PortTaken { port, .. } => Some(format!(
                "stop what listens on port {port} (`ss -ltnp 'sport = :{port}'`), or publish another host port"
            )),
            NetError::PortUnavailable { .. } => {
                Some("ports below 1024 need root; publish a higher host port".into())
            }
            NetError::BadPublish { .. } => Some(
                "--publish HOST:BOX or HOSTIP:HOST:BOX, e.g. --publish 8080:80 (TCP)".into(),
            ),
            NetError::Attach { rootless: true, .. } => Some(
                "pasta must be able to join the box's user and network namespaces as you; run the box as root, or use --network none".into(),
            ),
            _ => None,
        }
    }
}

/// A host TCP port forwarded to a port of the box (`--publish [HOSTIP:]HOST:BOX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Publish {
    /// The host address to listen on; `None`: the host's loopback (`127.0.0.1`) only, so a
    /// box's server is not offered to the host's network unless the user names an address
    /// (`0.0.0.0:8080:80` for every one, as `docker run -p 8080:80` does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_ip: Option<Ipv4Addr>,
    pub host_port: u16,
    pub box_port: u16,
}

impl Publish {
    /// The host address `pasta` listens on.
    pub fn host_addr(&self) -> SocketAddrV4 {
        SocketAddrV4::new(self.host_ip.unwrap_or(Ipv4Addr::LOCALHOST), self.host_port)
    }

    /// `pasta -t` spec: `ADDR/HOST:BOX` (always with the address: pasta's own default is
    /// every address).
    fn pasta_spec(&self) -> String {
        format!(
            "{}/{}:{}",
            self.host_addr().ip(),
            self.host_port,
            self.box_port
        )
    }
}

impl fmt::Display for Publish {
    /// `8080->8123` (the host's loopback), or `0.0.0.0:8080->8123` with a host address.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(ip) = self.host_ip {
            write!(f, "{ip}:")?;
        }
        write!(f, "{}->{}", self.host_port, self.box_port)
    }
}

impl FromStr for Publish {
    type Err = NetError;

    /// `HOST:BOX` or `HOSTIP:HOST:BOX`, optionally followed by `/tcp`.
    fn from_str(spec: &str) -> Result<Publish, NetError> {
        let bad = |why: &str| NetError::BadPublish {
            spec: spec.to_owned(),
            why: why.to_owned(),
        };
        let ports = match spec.rsplit_once('/') {
            Some((p, "tcp")) => p,
            Some((_, proto)) => {
                return Err(bad(&format!(
                    "only TCP ports can be published, not {proto:?}"
                )))
            }
            None => spec,
        };
        let port = |s: &str, which: &str| -> Result<u16, NetError> {
            match s.parse::<u16>() {
                Ok(p) if p > 0 => Ok(p),
                _ => Err(bad(&format!("{which} port {s:?} is not a port (1-65535)"))),
            }
        };
        let parts: Vec<&str> = ports.split(':').collect();
        let (host_ip, host, boxp) = match parts.as_slice() {
            [h, b] => (None, *h, *b),
            [ip, h, b] => {
                let ip = ip
                    .parse::<Ipv4Addr>()
                    .map_err(|_| bad(&format!("{ip:?} is not an IPv4 address")))?;
                (Some(ip), *h, *b)
            }
            _ => return Err(bad("expected HOST:BOX or HOSTIP:HOST:BOX")),
        };
        Ok(Publish {
            host_ip,
            host_port: port(host, "host")?,
            box_port: port(boxp, "box")?,
        })
    }
}

/// Parse `--publish` values, refusing one host port published twice.
pub fn parse_publish(specs: &[String]) -> Result<Vec<Publish>, NetError> {
    let mut out: Vec<Publish> = Vec::new();
    for s in specs {
        let p: Publish = s.parse()?;
        if out.iter().any(|q| q.host_port == p.host_port) {
            return Err(NetError::BadPublish {
                spec: s.clone(),
                why: format!("host port {} is published twice", p.host_port),
            });
        }
        out.push(p);
    }
    Ok(out)
}

/// The device `pasta` makes the box's interface with.
const TUN_PATH: &str = "/dev/net/tun";

fn tun_why(mode: &Option<u32>) -> String {
    match mode {
        Some(m) => format!("its mode ({:o}) lets only its owner open it", m & 0o7777),
        None => "it does not exist".to_owned(),
    }
}

/// Whether a private network can be made here: `pasta` is installed (its path) and, for a
/// rootless box, the tun device is open to the caller (pasta makes the box's interface
/// with it, as the caller). `what` names the box, for the errors.
pub fn preflight(what: &str, rootless: bool) -> Result<PathBuf, NetError> {
    let pasta = find_pasta(what)?;
    if rootless
        && rustix::fs::access(
            TUN_PATH,
            rustix::fs::Access::READ_OK | rustix::fs::Access::WRITE_OK,
        )
        .is_err()
    {
        use std::os::unix::fs::PermissionsExt;
        return Err(NetError::TunDenied {
            what: what.to_owned(),
            mode: fs_err::metadata(TUN_PATH)
                .ok()
                .map(|m| m.permissions().mode()),
        });
    }
    Ok(pasta)
}

/// Where `pasta` is: the first `pasta` on `PATH` (the usual system directories when
/// `PATH` is unset). `what` names who needs it, for the error.
fn find_pasta(what: &str) -> Result<PathBuf, NetError> {
    let path = std::env::var_os("PATH")
        .unwrap_or_else(|| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(PASTA))
        .find(|p| p.is_file())
        .ok_or_else(|| NetError::PastaMissing {
            what: what.to_owned(),
            path: path.to_string_lossy().into_owned(),
        })
}

/// Check that every host port of `publish` can be listened on now (a clear error naming
/// the port, before `pasta` would fail on it less clearly).
pub fn check_ports(box_name: &str, publish: &[Publish]) -> Result<(), NetError> {
    for p in publish {
        let addr = p.host_addr();
        // Bound and closed at once: `pasta` binds it for real right after.
        if let Err(e) = TcpListener::bind(addr) {
            return Err(if e.kind() == std::io::ErrorKind::AddrInUse {
                NetError::PortTaken {
                    box_name: box_name.to_owned(),
                    port: p.host_port,
                    addr,
                }
            } else {
                NetError::PortUnavailable {
                    box_name: box_name.to_owned(),
                    port: p.host_port,
                    addr,
                    source: e,
                }
            });
        }
    }
    Ok(())
}

/// What the private network's `/etc/resolv.conf` says: the name server [`DNS`], with the
/// host's search domains and options (the host's name servers may be on its loopback,
/// which the box cannot reach).
pub fn resolv_conf(host: &str) -> String {
    let mut out =
        format!("# agentbox private network: DNS is forwarded by pasta\nnameserver {DNS}\n");
    for line in host.lines() {
        let t = line.trim_start();
        if t.starts_with("search") || t.starts_with("domain") || t.starts_with("options") {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// A running `pasta` attached to a box's network namespace.
#[derive(Debug)]
pub struct Pasta {
    child: Child,
}

impl Pasta {
    /// Attach the network namespace of `ns_pid` (a box process with no capabilities: the
    /// box's launcher, see `init::launcher_main`) to the outside, publishing `publish`.
    /// Returns once the box's interface and default route are configured. `log` receives
    /// `pasta`'s messages.
    ///
    /// Dies with the calling thread (`PR_SET_PDEATHSIG`): call it from the thread that
    /// started the box.
    pub fn attach(
        pasta: &Path,
        box_name: &str,
        ns_pid: u32,
        rootless: bool,
        publish: &[Publish],
        log: &Path,
    ) -> Result<Pasta, NetError> {
        let io = |path: &Path, source| NetError::Io {
            box_name: box_name.to_owned(),
            path: path.to_owned(),
            source,
        };
        let log_file = fs_err::File::create(log)
            .map_err(|e| io(log, e))?
            .into_parts()
            .0;
        let mut cmd = Command::new(pasta);
        // Foreground, so it stays our child; quiet, so the log holds only what went wrong.
        cmd.args(["--foreground", "--quiet"]);
        if !rootless {
            // As root, pasta would drop to `nobody` before opening the box's namespaces,
            // and then could not join them. It keeps only the capabilities it needs.
            cmd.args(["--runas", "0:0"]);
        }
        cmd.args(["--config-net", "--ipv4-only", "--ns-ifname", "eth0"])
            .args(["--address", &BOX_ADDRESS.to_string()])
            .args(["--netmask", &PREFIX_LEN.to_string()])
            .args(["--gateway", &GATEWAY.to_string()])
            // The gateway is not the host: the host's loopback stays out of reach.
            .arg("--no-map-gw")
            .args(["--dns-forward", &DNS.to_string()])
            // No port of the host's loopback appears in the box (pasta's default forwards
            // every one bound there), no UDP port comes in.
            .args([
                "--tcp-ns",
                "none",
                "--udp-ns",
                "none",
                "--udp-ports",
                "none",
            ]);
        if publish.is_empty() {
            cmd.args(["--tcp-ports", "none"]);
        }
        for p in publish {
            cmd.args(["--tcp-ports", &p.pasta_spec()]);
        }
        if rootless {
            cmd.arg("--userns").arg(format!("/proc/{ns_pid}/ns/user"));
        }
        cmd.arg("--netns").arg(format!("/proc/{ns_pid}/ns/net"));
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file);
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|e| NetError::Spawn {
            box_name: box_name.to_owned(),
            pasta: pasta.to_owned(),
            source: e,
        })?;
        let mut running = Pasta { child };
        let failed = |message: String| NetError::Attach {
            box_name: box_name.to_owned(),
            rootless,
            message,
        };
        // Ready once the box's namespace has a default route: pasta configures the address
        // first, the routes last. Its `--pid` file is no signal (newer versions close every
        // inherited descriptor, older ones write it at different points).
        let route = PathBuf::from(format!("/proc/{ns_pid}/net/route"));
        let deadline = Instant::now() + ATTACH_TIMEOUT;
        loop {
            if let Ok(Some(status)) = running.child.try_wait() {
                return Err(failed(pasta_message(log, status)));
            }
            match fs_err::read_to_string(&route) {
                Ok(table) if has_default_route(&table) => return Ok(running),
                Ok(_) => {}
                Err(e) => {
                    running.kill();
                    return Err(io(&route, e));
                }
            }
            if Instant::now() > deadline {
                running.kill();
                return Err(failed(format!(
                    "the box's interface was not configured within {} s",
                    ATTACH_TIMEOUT.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Stop `pasta` and wait for it (closing the published ports).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Pasta {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether `/proc/net/route` text holds a default route.
fn has_default_route(table: &str) -> bool {
    table
        .lines()
        .skip(1)
        .any(|l| l.split_whitespace().nth(1) == Some("00000000"))
}

/// What pasta said before it exited (its log, less the lines about a missing syslog).
fn pasta_message(log: &Path, status: std::process::ExitStatus) -> String {
    let text = fs_err::read_to_string(log).unwrap_or_default();
    let said: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("Failed to send") && !l.contains("syslog"))
        .collect();
    if said.is_empty() {
        format!("it exited with {status}")
    } else {
        format!("{} ({status})", said.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_specs_parse_and_print() {
        let p: Publish = "8080:8123".parse().expect("parses");
        assert_eq!(
            p,
            Publish {
                host_ip: None,
                host_port: 8080,
                box_port: 8123
            }
        );
        assert_eq!(p.to_string(), "8080->8123");
        // No address: the host's loopback only.
        assert_eq!(p.pasta_spec(), "127.0.0.1/8080:8123");
        assert_eq!(p.host_addr(), SocketAddrV4::new(Ipv4Addr::LOCALHOST, 8080));
        let all: Publish = "0.0.0.0:8080:80".parse().expect("parses");
        assert_eq!(all.pasta_spec(), "0.0.0.0/8080:80");
        let q: Publish = "127.0.0.1:9000:80/tcp".parse().expect("parses");
        assert_eq!(q.to_string(), "127.0.0.1:9000->80");
        assert_eq!(q.pasta_spec(), "127.0.0.1/9000:80");
        for bad in [
            "8080",
            "0:80",
            "80:70000",
            "x:80",
            "::1:80:80",
            "1.2.3:80:80",
            "80:80/udp",
        ] {
            assert!(bad.parse::<Publish>().is_err(), "{bad}");
        }
        let twice = parse_publish(&["80:1".into(), "80:2".into()]).expect_err("refused");
        assert!(twice.to_string().contains("published twice"), "{twice}");
    }

    #[test]
    fn resolv_conf_names_only_the_forwarder() {
        let r = resolv_conf("nameserver 127.0.0.53\nsearch example.org\noptions edns0\n");
        assert!(r.contains("nameserver 10.0.2.3\n"), "{r}");
        assert!(!r.contains("127.0.0.53"), "{r}");
        assert!(
            r.contains("search example.org\n") && r.contains("options edns0\n"),
            "{r}"
        );
    }

    #[test]
    fn default_route_is_found() {
        let table = "Iface\tDestination\tGateway\tFlags\n\
                     eth0\t0002000A\t00000000\t0001\n";
        assert!(!has_default_route(table));
        let table = format!("{table}eth0\t00000000\t0202000A\t0003\n");
        assert!(has_default_route(&table));
    }
}
