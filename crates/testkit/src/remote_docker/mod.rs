//! A second Docker engine that is "remote": its own `dockerd` (own data root, exec root,
//! pidfile and socket) in a network namespace of the test's own, reached from the host over
//! a veth pair on a private /30 — over `tcp://` with mutual TLS and over `ssh://` through an
//! `sshd` in the same namespace. Root only (tier 2).
//!
//! It must not disturb the host: the engine runs with `--bridge=none --iptables=false
//! --ip-masq=false` and its own `--config-file`, so the host's engine, its networks and its
//! firewall are untouched; the ssh client reads a configuration of the fixture's own (an
//! `ssh` wrapper first on `PATH`, because `ssh` reads `~/.ssh` from the password database,
//! not from `HOME`), so nothing is written to the user's `~/.ssh`.
//!
//! Layout of the fixture's directory (removed at the end):
//! `data/` (`--data-root`), `exec/` (`--exec-root`), `dockerd.pid`, `remote.sock`,
//! `dockerd.log`, `tls/` (CA, server certificate and key), `client/` and `untrusted/`
//! (`ca.pem`, `cert.pem`, `key.pem` as `DOCKER_CERT_PATH` wants them; the untrusted client
//! certificate is signed by another CA), `ssh/` (host key, client key, `authorized_keys.USER`,
//! `known_hosts`, `sshd_config`, `config`, `sshd.log`; `counted` is a second client key, used
//! for the host alias [`COUNTED_HOST`] only, so that a test can count its logins), `bin/ssh`
//! (the wrapper).
//!
//! Concurrent test processes each get a slot `N` (a lock file): network namespace
//! `agentbox-rd<N>`, veths `abrd<N>h`/`abrd<N>n`, addresses `198.18.N.1` (host) and
//! `198.18.N.2` (namespace) in the benchmarking range RFC 2544 reserves. Whoever takes a slot
//! first removes what a killed process may have left in it (the lock file names its
//! directory).

mod slots;
use slots::*;

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::tier;

/// Slots tried for concurrent fixtures.
const SLOTS: u8 = 64;
/// A host name only the fixture's ssh configuration knows: the namespace's address, logged
/// into with a key of its own.
pub const COUNTED_HOST: &str = "agentbox-counted";
/// The engine's TLS port.
pub const TLS_PORT: u16 = 2376;
/// A second TLS port of the engine, whose new connections [`RemoteDocker::counted_tls_connections`]
/// counts.
pub const COUNTED_TLS_PORT: u16 = 2377;
/// How long the engine and sshd may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(90);
/// How long the engine may take to stop its containers and exit on SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// A running second engine; torn down (processes, namespace, veth, mounts, directory) on
/// drop.
pub struct RemoteDocker {
    dir: tempfile::TempDir,
    slot: u8,
    ns_ip: Ipv4Addr,
    dockerd: Option<Child>,
    sshd: Option<Child>,
    /// The environment as it was before the fixture changed `PATH`.
    saved_env: Vec<(&'static str, Option<std::ffi::OsString>)>,
    /// Held for the fixture's life: the slot is ours.
    _slot_lock: fs_err::File,
}

/// The fixture of this process, shared by its tests: started by the first test that asks,
/// torn down when the last one holding it ends.
static SHARED: Mutex<Weak<RemoteDocker>> = Mutex::new(Weak::new());

/// The shared fixture, or `None` (after printing why; a panic under `CI=true`) when this
/// machine cannot run it.
pub fn shared(test: &str) -> Option<Arc<RemoteDocker>> {
    if !tier::require_root(test) {
        return None;
    }
    for tool in [
        "ip",
        "tc",
        "iptables",
        "nsenter",
        "dockerd",
        "docker",
        "sshd",
        "ssh",
        "ssh-keygen",
        "busybox",
    ] {
        if !tier::require_tool(test, tool) {
            return None;
        }
    }
    let mut guard = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(f) = guard.upgrade() {
        return Some(f);
    }
    let f = Arc::new(RemoteDocker::start());
    *guard = Arc::downgrade(&f);
    Some(f)
}

impl RemoteDocker {
    fn netns(&self) -> String {
        netns_name(self.slot)
    }

    /// The fixture's directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The namespace's address, where the engine and sshd listen.
    pub fn ip(&self) -> Ipv4Addr {
        self.ns_ip
    }

    /// The engine's own socket, on the host's filesystem (the same engine, no network).
    pub fn unix_host(&self) -> String {
        format!("unix://{}", self.dir().join("remote.sock").display())
    }

    /// `tcp://IP:2376`: mutual TLS with the files of [`Self::client_certs`].
    pub fn tcp_host(&self) -> String {
        format!("tcp://{}:{TLS_PORT}", self.ns_ip)
    }

    /// `ssh://root@IP`: `docker system dial-stdio` on the other side reaches this engine.
    pub fn ssh_host(&self) -> String {
        format!("ssh://root@{}", self.ns_ip)
    }

    /// `tcp://IP:2377`: the same engine with the same TLS, on the port whose connections
    /// [`Self::counted_tls_connections`] counts.
    pub fn counted_tcp_host(&self) -> String {
        format!("tcp://{}:{COUNTED_TLS_PORT}", self.ns_ip)
    }

    /// How many TCP connections were opened to [`Self::counted_tcp_host`].
    pub fn counted_tls_connections(&self) -> u64 {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.netns()])
            .args(["iptables", "-w", "-L", "INPUT", "-v", "-n", "-x"])
            .output()
            .expect("iptables -L");
        let text = String::from_utf8_lossy(&out.stdout);
        let dport = format!("dpt:{COUNTED_TLS_PORT}");
        // `    pkts      bytes target prot opt in out source destination  … dpt:2377 …`
        text.lines()
            .find(|l| l.contains(&dport))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no counting rule in:\n{text}"))
    }

    /// `ssh://root@COUNTED_HOST`: the same engine over ssh with a key of its own, whose
    /// logins [`Self::counted_logins`] counts.
    pub fn counted_ssh_host(&self) -> String {
        format!("ssh://root@{COUNTED_HOST}")
    }

    /// How many times sshd let the key of [`Self::counted_ssh_host`] in.
    pub fn counted_logins(&self) -> usize {
        let ssh = self.dir().join("ssh");
        let out = Command::new("ssh-keygen")
            .arg("-lf")
            .arg(ssh.join("counted.pub"))
            .output()
            .expect("ssh-keygen -l");
        let text = String::from_utf8_lossy(&out.stdout);
        let fingerprint = text.split_whitespace().nth(1).expect("a fingerprint");
        // `Accepted publickey for root from 198.18.0.1 port 40000 ssh2: ED25519 SHA256:…`
        fs_err::read_to_string(ssh.join("sshd.log"))
            .expect("sshd log")
            .lines()
            .filter(|l| l.contains("Accepted publickey") && l.ends_with(fingerprint))
            .count()
    }

    /// Limit what the host sends to the namespace to `rate` (`tc` syntax: `4mbit`) until
    /// the guard is dropped: a slow link to a remote engine.
    pub fn limit_upload(&self, rate: &str) -> RateLimit {
        let (dev, _) = veth_names(self.slot);
        run(
            "tc",
            &[
                "qdisc", "add", "dev", &dev, "root", "tbf", "rate", rate, "burst", "32kbit",
                "latency", "400ms",
            ],
        );
        RateLimit { dev }
    }

    /// A directory with `ca.pem`, `cert.pem`, `key.pem` of a client the engine trusts.
    pub fn client_certs(&self) -> PathBuf {
        self.dir().join("client")
    }

    /// The same, for a client whose certificate another CA signed (the engine refuses it).
    pub fn untrusted_certs(&self) -> PathBuf {
        self.dir().join("untrusted")
    }

    /// The engine's log, for a failing test's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir().join("dockerd.log")).unwrap_or_default()
    }

    fn start() -> RemoteDocker {
        let (slot, lock) = take_slot();
        let dir = tempfile::Builder::new()
            .prefix("agentbox-remote-docker-")
            .tempdir()
            .expect("fixture directory");
        // The lock file names the directory, for the cleanup of a killed run.
        fs_err::write(lock_path(slot), dir.path().as_os_str().as_encoded_bytes())
            .expect("record the fixture directory");
        let mut f = RemoteDocker {
            dir,
            slot,
            ns_ip: Ipv4Addr::new(198, 18, slot, 2),
            dockerd: None,
            sshd: None,
            saved_env: Vec::new(),
            _slot_lock: lock,
        };
        f.network();
        f.certificates();
        f.start_dockerd();
        f.start_sshd();
        f.ssh_client();
        f
    }

    /// The namespace and the veth pair: host `.1`, namespace `.2`.
    fn network(&self) {
        let ns = self.netns();
        let (h, n) = veth_names(self.slot);
        let host_ip = Ipv4Addr::new(198, 18, self.slot, 1);
        run("ip", &["netns", "add", &ns]);
        run(
            "ip",
            &["link", "add", &h, "type", "veth", "peer", "name", &n],
        );
        run("ip", &["link", "set", &n, "netns", &ns]);
        run("ip", &["addr", "add", &format!("{host_ip}/30"), "dev", &h]);
        run("ip", &["link", "set", &h, "up"]);
        let in_ns = |args: &[&str]| {
            let mut all = vec!["netns", "exec", ns.as_str(), "ip"];
            all.extend_from_slice(args);
            run("ip", &all);
        };
        in_ns(&["addr", "add", &format!("{}/30", self.ns_ip), "dev", &n]);
        in_ns(&["link", "set", &n, "up"]);
        in_ns(&["link", "set", "lo", "up"]);
        // A rule that only counts: the connections opened to the counted port. The
        // namespace's firewall goes with the namespace.
        let port = COUNTED_TLS_PORT.to_string();
        run(
            "ip",
            &[
                "netns", "exec", &ns, "iptables", "-w", "-A", "INPUT", "-p", "tcp", "--syn",
                "--dport", &port,
            ],
        );
    }

    /// A CA, the engine's certificate for the namespace's address, a client certificate,
    /// and a client certificate of another CA.
    fn certificates(&self) {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair, KeyUsagePurpose,
        };
        let ca = |name: &str| {
            let mut p = CertificateParams::new(Vec::<String>::new()).expect("ca params");
            p.distinguished_name.push(DnType::CommonName, name);
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
            let key = KeyPair::generate().expect("ca key");
            let cert = p.self_signed(&key).expect("ca cert");
            (cert.pem(), Issuer::new(p, key))
        };
        let leaf = |sans: Vec<String>, usage: ExtendedKeyUsagePurpose, issuer: &Issuer<_>| {
            let mut p = CertificateParams::new(sans).expect("leaf params");
            p.distinguished_name
                .push(DnType::CommonName, "agentbox test");
            p.key_usages = vec![
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment,
            ];
            p.extended_key_usages = vec![usage];
            let key = KeyPair::generate().expect("leaf key");
            let cert = p.signed_by(&key, issuer).expect("leaf cert");
            (cert.pem(), key.serialize_pem())
        };
        let (ca_pem, issuer) = ca("agentbox test CA");
        let (other_ca_pem, other) = ca("another CA");
        let _ = other_ca_pem;
        let write = |sub: &str, files: &[(&str, &str)]| {
            let d = self.dir().join(sub);
            fs_err::create_dir_all(&d).expect("tls dir");
            for (name, text) in files {
                fs_err::write(d.join(name), text).expect("tls file");
            }
        };
        let (server, server_key) = leaf(
            vec![self.ns_ip.to_string()],
            ExtendedKeyUsagePurpose::ServerAuth,
            &issuer,
        );
        write(
            "tls",
            &[
                ("ca.pem", &ca_pem),
                ("cert.pem", &server),
                ("key.pem", &server_key),
            ],
        );
        let (client, client_key) = leaf(vec![], ExtendedKeyUsagePurpose::ClientAuth, &issuer);
        write(
            "client",
            &[
                ("ca.pem", &ca_pem),
                ("cert.pem", &client),
                ("key.pem", &client_key),
            ],
        );
        // It trusts the engine (the right CA) but the engine does not trust it.
        let (stranger, stranger_key) = leaf(vec![], ExtendedKeyUsagePurpose::ClientAuth, &other);
        write(
            "untrusted",
            &[
                ("ca.pem", &ca_pem),
                ("cert.pem", &stranger),
                ("key.pem", &stranger_key),
            ],
        );
    }

    fn start_dockerd(&mut self) {
        let d = self.dir().to_owned();
        let tls = d.join("tls");
        fs_err::write(d.join("daemon.json"), "{}\n").expect("daemon.json");
        let log = fs_err::File::create(d.join("dockerd.log")).expect("dockerd log");
        let err = log.try_clone().expect("dockerd log");
        let path = |p: PathBuf| p.display().to_string();
        let child = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", self.netns()))
            .arg("--")
            .arg("dockerd")
            .args(["--config-file", &path(d.join("daemon.json"))])
            .args(["--data-root", &path(d.join("data"))])
            .args(["--exec-root", &path(d.join("exec"))])
            .args(["--pidfile", &path(d.join("dockerd.pid"))])
            .args(["-H", &self.unix_host()])
            .args(["-H", &self.tcp_host()])
            .args(["-H", &self.counted_tcp_host()])
            .arg("--tlsverify")
            .args(["--tlscacert", &path(tls.join("ca.pem"))])
            .args(["--tlscert", &path(tls.join("cert.pem"))])
            .args(["--tlskey", &path(tls.join("key.pem"))])
            .args(["--bridge=none", "--iptables=false", "--ip-masq=false"])
            .args(["--shutdown-timeout", "5"])
            .stdin(Stdio::null())
            .stdout(log.into_file())
            .stderr(err.into_file())
            .spawn()
            .expect("start dockerd");
        self.dockerd = Some(child);
        let sock = d.join("remote.sock");
        let tcp = SocketAddr::from((self.ns_ip, TLS_PORT));
        self.wait_for("dockerd", |_| {
            UnixStream::connect(&sock).is_ok()
                && TcpStream::connect_timeout(&tcp, Duration::from_secs(1)).is_ok()
        });
        // The counted port listens too, before anything is counted: the probe above was
        // for the other one.
        let counted = SocketAddr::from((self.ns_ip, COUNTED_TLS_PORT));
        let start = Instant::now();
        while TcpStream::connect_timeout(&counted, Duration::from_secs(1)).is_err() {
            assert!(start.elapsed() < START_TIMEOUT, "{}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        run(
            "ip",
            &[
                "netns",
                "exec",
                &self.netns(),
                "iptables",
                "-w",
                "-Z",
                "INPUT",
            ],
        );
    }

    fn start_sshd(&mut self) {
        let ssh = self.dir().join("ssh");
        fs_err::create_dir_all(&ssh).expect("ssh dir");
        for key in ["host_key", "id", "counted"] {
            run(
                "ssh-keygen",
                &[
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    "agentbox-test",
                    "-f",
                    &ssh.join(key).display().to_string(),
                ],
            );
        }
        let host_pub = fs_err::read_to_string(ssh.join("host_key.pub")).expect("host key");
        let mut host_pub = host_pub.split_whitespace();
        let (kind, key) = (
            host_pub.next().expect("key type"),
            host_pub.next().expect("key"),
        );
        fs_err::write(
            ssh.join("known_hosts"),
            format!("{} {kind} {key}\n", self.ns_ip),
        )
        .expect("known_hosts");
        // root runs the engine's dial-stdio; `nobody` may log in too, but has no shell to
        // run it with (a far side without a usable docker); any other user is refused.
        let id = fs_err::read_to_string(ssh.join("id.pub")).expect("id.pub");
        let counted = fs_err::read_to_string(ssh.join("counted.pub")).expect("counted.pub");
        fs_err::write(ssh.join("authorized_keys.root"), format!("{id}{counted}"))
            .expect("authorized_keys");
        fs_err::write(ssh.join("authorized_keys.nobody"), id).expect("authorized_keys");
        // `docker system dial-stdio` on the far side must reach this engine, not the
        // host's: the session's DOCKER_HOST says which.
        let config = format!(
            "ListenAddress {ip}:22\n\
             HostKey {ssh}/host_key\n\
             PidFile {ssh}/sshd.pid\n\
             AuthorizedKeysFile {ssh}/authorized_keys.%u\n\
             PermitRootLogin prohibit-password\n\
             PasswordAuthentication no\n\
             KbdInteractiveAuthentication no\n\
             UsePAM no\n\
             StrictModes no\n\
             SetEnv DOCKER_HOST={sock}\n",
            ip = self.ns_ip,
            ssh = ssh.display(),
            sock = self.unix_host(),
        );
        fs_err::write(ssh.join("sshd_config"), config).expect("sshd_config");
        // sshd insists on its privilege separation directory, which its package's boot
        // scripts create.
        fs_err::create_dir_all("/run/sshd").expect("/run/sshd");
        let log = fs_err::File::create(ssh.join("sshd.log")).expect("sshd log");
        let sshd = which("sshd").expect("sshd on PATH");
        let child = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", self.netns()))
            .arg("--")
            .arg(sshd)
            .args(["-D", "-e", "-f"])
            .arg(ssh.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log.into_file())
            .spawn()
            .expect("start sshd");
        self.sshd = Some(child);
        let addr = SocketAddr::from((self.ns_ip, 22));
        self.wait_for("sshd", |_| {
            TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
        });
    }

    /// The client side: `ssh` on `PATH` becomes a wrapper reading the fixture's own
    /// configuration (its key, the host key it expects).
    fn ssh_client(&mut self) {
        let d = self.dir().to_owned();
        let ssh = d.join("ssh");
        let config = format!(
            "Host {COUNTED_HOST}\n  HostName {ip}\n  IdentityFile {ssh}/counted\nHost *\n  IdentityFile {ssh}/id\n  IdentitiesOnly yes\n  UserKnownHostsFile {ssh}/known_hosts\n  GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n  BatchMode yes\n  LogLevel ERROR\n",
            ssh = ssh.display(),
            ip = self.ns_ip,
        );
        fs_err::write(ssh.join("config"), config).expect("ssh config");
        let real = which("ssh").expect("ssh on PATH");
        let bin = d.join("bin");
        fs_err::create_dir_all(&bin).expect("bin");
        fs_err::write(
            bin.join("ssh"),
            format!(
                "#!/bin/sh\nexec '{}' -F '{}' \"$@\"\n",
                real.display(),
                ssh.join("config").display()
            ),
        )
        .expect("ssh wrapper");
        fs_err::set_permissions(
            bin.join("ssh"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod ssh wrapper");
        let old_path = std::env::var_os("PATH");
        let mut paths = vec![bin];
        paths.extend(std::env::split_paths(
            old_path.as_deref().unwrap_or_default(),
        ));
        let new_path = std::env::join_paths(paths).expect("PATH");
        self.saved_env = vec![("PATH", old_path)];
        // Tests of this binary share the fixture, and it is made under SHARED's lock
        // before any of them connects.
        std::env::set_var("PATH", new_path);
    }

    /// Wait until `ready`, or panic with the logs when the daemons died or time ran out.
    fn wait_for(&mut self, what: &str, ready: impl Fn(&Self) -> bool) {
        let start = Instant::now();
        loop {
            if ready(self) {
                return;
            }
            let exited = [&mut self.dockerd, &mut self.sshd]
                .into_iter()
                .flatten()
                .find_map(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                panic!(
                    "{what} of the remote engine fixture exited ({status}):\n{}\n{}",
                    self.log(),
                    std::fs::read_to_string(self.dir().join("ssh/sshd.log")).unwrap_or_default()
                );
            }
            if start.elapsed() > START_TIMEOUT {
                panic!(
                    "{what} of the remote engine fixture does not listen after {} s:\n{}",
                    START_TIMEOUT.as_secs(),
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A rate limit on the host's side of the veth; lifted on drop.
pub struct RateLimit {
    dev: String,
}

impl Drop for RateLimit {
    fn drop(&mut self) {
        let _ = Command::new("tc")
            .args(["qdisc", "del", "dev", &self.dev, "root"])
            .status();
    }
}

impl Drop for RemoteDocker {
    fn drop(&mut self) {
        for (name, value) in &self.saved_env {
            match value {
                Some(v) => std::env::set_var(name, v),
                None => std::env::remove_var(name),
            }
        }
        // The engine first, politely: it stops its containers and unmounts their layers.
        if let Some(mut d) = self.dockerd.take() {
            signal(d.id(), rustix::process::Signal::TERM);
            let start = Instant::now();
            while matches!(d.try_wait(), Ok(None)) && start.elapsed() < STOP_TIMEOUT {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = d.kill();
            let _ = d.wait();
        }
        // Then everything else in the namespace: sshd, its sessions, containerd, shims.
        remove_slot(self.slot, Some(self.dir.path()));
        if let Some(mut s) = self.sshd.take() {
            let _ = s.kill();
            let _ = s.wait();
        }
        // The slot is clean: nothing for the next holder to remove.
        let _ = fs_err::write(lock_path(self.slot), "");
    }
}
