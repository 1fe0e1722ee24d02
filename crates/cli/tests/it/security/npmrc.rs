//! The host user's `~/.npmrc` on its way into a box: its safe settings (registry, scoped
//! registries, update-notifier…) reach npm in the box, its tokens never reach the box in
//! any form a host file may hold them (spaced, quoted, upper-cased, per registry, in a
//! URL's user and password, as `${VAR}` references). Root and rootless (as `nobody`).

use std::path::{Path, PathBuf};
use std::process::Output;

use super::Sec;
use crate::common::{code, stderr, write, Env};
use agentbox_testkit::tier::require_root;

/// Secrets of the host's `~/.npmrc`, each unique to this test.
const TOKENS: &[&str] = &[
    "npmtok-urlpass-7731",
    "npmtok-authtoken-7732",
    "npmtok-scoped-7733",
    "npmtok-upper-7734",
    "npmtok-auth-7735",
    "npmtok-password-7736",
    "npmtok-email-7737",
    "npmtok-query-7738",
    "npmtok-alone-7739",
];

fn host_npmrc() -> String {
    format!(
        "; the host's settings (comment {alone})
registry = \"https://alice:{urlpass}@registry.example.com/\"
@corp:registry=https://npm.corp.example/repo/?access_token={query}
update-notifier=false
  FUND = false
save-exact='true'
//registry.npmjs.org/:_authToken={authtoken}
//npm.corp.example/repo/:_authToken = \"{scoped}\"
  _AUTHTOKEN = '{upper}'
_auth={auth}
//npm.corp.example/repo/:_password={password}
email={email}@example.com
//registry.npmjs.org/:_auth=${{NPM_TOKEN}}
loglevel=${{NPM_TOKEN}}
{alone}
",
        urlpass = TOKENS[0],
        authtoken = TOKENS[1],
        scoped = TOKENS[2],
        upper = TOKENS[3],
        auth = TOKENS[4],
        password = TOKENS[5],
        email = TOKENS[6],
        query = TOKENS[7],
        alone = TOKENS[8],
    )
}

/// agentbox run with `HOME` the test's host user's home, as root or as `nobody`.
struct Npm {
    s: Sec,
    user: PathBuf,
    abhome: PathBuf,
    rootless: bool,
}

impl Npm {
    fn run(&self, args: &[&str]) -> Output {
        let mut c = if self.rootless {
            let exe = self.abhome.join("agentbox");
            if !exe.exists() {
                std::fs::copy(env!("CARGO_BIN_EXE_agentbox"), &exe).expect("copy the binary");
            }
            let mut c = std::process::Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(exe)
                .args(args)
                .env("AGENTBOX_HOME", &self.abhome);
            c
        } else {
            self.s.env.command(args)
        };
        c.env("HOME", &self.user).current_dir("/");
        c.output().expect("run agentbox")
    }

    fn sh(&self, script: &str) -> String {
        let out = self.run(&["exec", "npm", "--", "sh", "-c", script]);
        assert_eq!(code(&out), Some(0), "{script}: {}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

fn the_npmrc_reaches_a_box_without_its_tokens(test: &str, rootless: bool) {
    if !require_root(test) {
        return;
    }
    let s = Sec { env: Env::new() };
    let root = s.env.home.path().to_owned();
    let (user, proj, abhome) = (root.join("user"), root.join("proj"), s.env.path("home"));
    write(&proj.join("README"), "readme\n");
    write(&user.join(".npmrc"), &host_npmrc());
    std::fs::create_dir_all(&abhome).expect("mkdir");
    if rootless {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        for p in [&user, &proj, &abhome] {
            crate::common::chown_nobody(p);
        }
    }
    let n = Npm {
        s,
        user,
        abhome,
        rootless,
    };
    let out = n.run(&["create", "npm", "--from", proj.to_str().expect("utf-8")]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));

    // The safe settings are npm's in the box, from its global configuration.
    let conf = n.sh("cat \"$npm_config_globalconfig\"");
    for safe in [
        "registry=https://registry.example.com/\n",
        "@corp:registry=https://npm.corp.example/repo/\n",
        "update-notifier=false\n",
        "FUND=false\n",
        "save-exact=true\n",
    ] {
        assert!(conf.contains(safe), "{safe:?} is missing: {conf}");
    }
    for gone in ["alice", "NPM_TOKEN", "_auth", "email", "loglevel", "/:_"] {
        let body: String = conf.lines().skip(1).collect();
        assert!(!body.contains(gone), "{gone} reached the box: {conf}");
    }
    if n.sh("command -v npm || true").trim().is_empty() {
        agentbox_testkit::tier::skip(test, "npm is not installed: its reading is not checked");
    } else {
        let got = n.sh("npm config get registry; npm config get @corp:registry");
        assert_eq!(
            got, "https://registry.example.com/\nhttps://npm.corp.example/repo/\n",
            "npm in the box reads the host's settings"
        );
        // The box's own ~/.npmrc is the box's, and wins.
        let got = n.sh(
            "npm config set registry https://box.example/ && npm config get registry && cat ~/.npmrc",
        );
        assert!(got.starts_with("https://box.example/\n"), "{got}");
    }

    // No token anywhere in the box (searched in two halves, so that the search's own
    // command line cannot match), nor in the agentbox home on the host.
    // A control the search must find: it does look where a token could be.
    let mut script = String::from("c=\"npmtok-con\"\"trol-7730\"; echo \"$c\" > /tmp/control; ");
    let mut patterns = String::from(" -e \"$c\"");
    for (i, token) in TOKENS.iter().enumerate() {
        let (x, y) = token.split_at(token.len() / 2);
        script.push_str(&format!("k{i}=\"{x}\"\"{y}\"; "));
        patterns.push_str(&format!(" -e \"$k{i}\""));
    }
    script.push_str(&format!(
        "grep -rlsF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev{patterns} / 2>/dev/null; true"
    ));
    let found = n.sh(&script);
    assert_eq!(found, "/tmp/control\n", "tokens reached the box");
    let held = std::process::Command::new("grep")
        .args(["-rlsF"])
        .args(TOKENS.iter().flat_map(|t| ["-e", t]))
        .arg(&n.abhome)
        .output()
        .expect("grep");
    assert_eq!(
        String::from_utf8_lossy(&held.stdout),
        "",
        "tokens in the agentbox home"
    );
    // The host's file is left as it was.
    assert_eq!(
        std::fs::read_to_string(Path::new(&n.user).join(".npmrc")).expect("read"),
        host_npmrc()
    );
}

#[test]
fn the_npmrc_reaches_a_box_without_its_tokens_root() {
    the_npmrc_reaches_a_box_without_its_tokens(
        "the_npmrc_reaches_a_box_without_its_tokens_root",
        false,
    );
}

#[test]
fn the_npmrc_reaches_a_box_without_its_tokens_rootless() {
    the_npmrc_reaches_a_box_without_its_tokens(
        "the_npmrc_reaches_a_box_without_its_tokens_rootless",
        true,
    );
}

/// The box's npm reads its global configuration from the filtered file, so the host's
/// global npmrc comes first in it: a `cafile` there (a company's CA, a registry proxy's)
/// keeps npm working in the box, and the user's settings still win. Hiding it once broke
/// every `npm install` in boxes on a host whose registry is reached through such a CA.
#[test]
fn the_hosts_global_npmrc_stays_in_force_in_a_box() {
    let test = "the_hosts_global_npmrc_stays_in_force_in_a_box";
    if !require_root(test) {
        return;
    }
    let s = Sec { env: Env::new() };
    let root = s.env.home.path().to_owned();
    let (user, proj) = (root.join("user"), root.join("proj"));
    write(&proj.join("README"), "readme\n");
    write(
        &user.join(".npmrc"),
        "registry=https://user.example/\n_authToken=sekrit\n",
    );
    let global = root.join("global-npmrc");
    write(
        &global,
        "cafile=/etc/ssl/certs/company-ca.pem\nregistry=https://global.example/\n\
         //global.example/:_authToken=globalsekrit\n",
    );
    let run = |args: &[&str]| {
        let out = s
            .env
            .command(args)
            .env("HOME", &user)
            .env("npm_config_globalconfig", &global)
            .current_dir("/")
            .output()
            .expect("run agentbox");
        assert_eq!(code(&out), Some(0), "{args:?}: {}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    run(&["create", "g", "--from", proj.to_str().expect("utf-8")]);
    let conf = run(&[
        "exec",
        "g",
        "--",
        "sh",
        "-c",
        "cat \"$npm_config_globalconfig\"",
    ]);
    let ca = conf
        .find("cafile=/etc/ssl/certs/company-ca.pem")
        .expect("the host's cafile");
    let global_registry = conf
        .find("registry=https://global.example/")
        .expect("global");
    let user_registry = conf
        .find("registry=https://user.example/")
        .expect("the user's");
    assert!(
        ca < user_registry && global_registry < user_registry,
        "{conf}"
    );
    // The global file is filtered too: it may sit where the box sees nothing (`/opt`).
    assert!(!conf.contains("sekrit"), "{conf}");
}
