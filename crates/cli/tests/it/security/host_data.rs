//! What of the host a box sees, and what the in-box `agentbox` may name: no host data but
//! the host paths asked for (never secrets), agentbox's own state private whatever the
//! umask, no other home or box chosen from inside, and box-written text escaped on the
//! host's terminal.

use std::path::{Path, PathBuf};

use crate::common::{code, stderr, write};

use super::*;

#[test]
fn host_data_is_not_visible_in_a_box() {
    let Some(s) = boxed("host_data_is_not_visible_in_a_box", "data", &[]) else {
        return;
    };
    let tag = format!("agentbox-sec-{}", std::process::id());
    let planted: Vec<PathBuf> = ["/srv", "/var/lib", "/var/backups", "/mnt"]
        .iter()
        .map(|d| Path::new(d).join(&tag))
        .collect();
    for p in &planted {
        write(&p.join("secret"), "host data\n");
    }
    // A new box start sees the planted data (the base is looked at when the box starts).
    s.env.ok(&["stop", "data"]);
    let script = planted
        .iter()
        .map(|p| format!("cat {}/secret 2>/dev/null;", p.display()))
        .collect::<String>()
        + "test -e /etc/shadow && echo shadow; ls /var/lib/dpkg >/dev/null && echo dpkg";
    let (_, out, err) = s.sh("data", &script);
    for p in &planted {
        let _ = std::fs::remove_dir_all(p);
    }
    assert_eq!(out, "dpkg\n", "host data reached the box: {out}{err}");
}

#[test]
fn host_paths_show_only_what_is_asked_and_never_secrets() {
    let Some(s) = boxed(
        "host_paths_show_only_what_is_asked_and_never_secrets",
        "none-shown",
        &[],
    ) else {
        return;
    };
    let tag = format!("agentbox-hp-{}", std::process::id());
    let srv = Path::new("/srv").join(&tag);
    let opt = Path::new("/opt").join(&tag);
    write(&srv.join("shown/f"), "shown\n");
    write(&srv.join("other/f"), "other\n");
    write(&opt.join("f"), "opt\n");
    let proj = s.env.path("proj");
    let proj = proj.to_str().expect("utf-8");
    let shown = format!("--host-path={}", srv.join("shown").display());
    let hidden_opt = format!("--host-path=!{}", opt.display());
    s.env
        .ok(&["create", "hp", "--from", proj, &shown, &hidden_opt]);
    let (_, out, err) = s.sh(
        "hp",
        &format!(
            "cat {srv}/shown/f; cat {srv}/other/f 2>/dev/null && echo other-visible; cat {opt}/f 2>/dev/null && echo opt-visible; echo x > {srv}/shown/new 2>/dev/null; test -e /etc/shadow && echo shadow; true",
            srv = srv.display(),
            opt = opt.display()
        ),
    );
    let (_, before, _) = s.sh(
        "none-shown",
        &format!("ls {} 2>/dev/null | wc -l", srv.display()),
    );
    let _ = std::fs::remove_dir_all(&srv);
    let _ = std::fs::remove_dir_all(&opt);
    assert_eq!(out, "shown\n", "{out}{err}");
    assert_eq!(
        before.trim(),
        "0",
        "without box.hostPaths /srv stays hidden"
    );
    assert!(
        !srv.join("shown/new").exists(),
        "the host path is read-only from the box"
    );
    // Secrets are never shown, as a flag or as configuration.
    for secret in ["/etc/shadow", "/etc/ssl/private"] {
        let out = s.env.run(&[
            "create",
            "oops",
            "--from",
            proj,
            &format!("--host-path={secret}"),
        ]);
        assert_eq!(code(&out), Some(2), "{}", stderr(&out));
        assert!(stderr(&out).contains("secrets"), "{}", stderr(&out));
        let out = s
            .env
            .run(&["config", "set", "--global", "box.hostPaths", secret]);
        assert_ne!(code(&out), Some(0), "{}", stderr(&out));
    }
}

#[test]
fn agentbox_state_is_private_whatever_the_umask() {
    let Some(s) = boxed("agentbox_state_is_private_whatever_the_umask", "priv", &[]) else {
        return;
    };
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    s.env.ok(&["start", "priv"]);
    let home = s.env.path("home");
    assert_eq!(mode(&home), 0o700, "the agentbox home");
    assert_eq!(mode(&home.join("store")), 0o700, "the store");
    // A second home made under umask 0 is private too.
    let other = s.env.path("other-home");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "umask 0; AGENTBOX_HOME={} {} env {}",
            other.display(),
            env!("CARGO_BIN_EXE_agentbox"),
            s.env.path("proj").display()
        ))
        .output()
        .expect("run");
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert_eq!(mode(&other), 0o700);
    assert_eq!(mode(&other.join("store")), 0o700);
    let _ = std::process::Command::new(env!("CARGO_BIN_EXE_agentbox"))
        .args(["destroy", "proj"])
        .env("AGENTBOX_HOME", &other)
        .output();
}

#[test]
fn agentbox_in_a_box_cannot_choose_another_home_or_box() {
    let Some(s) = boxed(
        "agentbox_in_a_box_cannot_choose_another_home_or_box",
        "relay",
        &[],
    ) else {
        return;
    };
    // A fake store in the box's own layer, named by --home in every spelling.
    for attack in [
        "agentbox --home /workspace/fake log",
        "agentbox log --home /workspace/fake",
        "agentbox --home=/workspace/fake status",
        "agentbox --ho /workspace/fake log",
        "agentbox -b relay --home /workspace/fake log",
        "agentbox --box=other log",
        "agentbox -brelay log",
    ] {
        let (status, _, err) = s.sh("relay", &format!("mkdir -p /workspace/fake; {attack}"));
        assert_eq!(status, 2, "{attack}: {err}");
        assert!(err.contains("not allowed inside a box"), "{attack}: {err}");
    }
    // Nothing of the box reaches the host's git command line.
    for attack in [
        "agentbox push --remote=--receive-pack=touch\\ /tmp/pwned",
        "agentbox push --remote /etc",
        "agentbox pull --remote origin",
        "agentbox pull --branch 'x:refs/heads/main'",
    ] {
        let (status, _, err) = s.sh("relay", attack);
        assert_eq!(status, 2, "{attack}: {err}");
        assert!(err.contains("not allowed inside a box"), "{attack}: {err}");
    }
    // The box's own commands still work.
    let (status, out, err) = s.sh("relay", "agentbox log --json");
    assert_eq!(status, 0, "{err}");
    assert!(out.contains("nodes"), "{out}");
}

#[test]
fn box_written_text_reaches_the_host_terminal_escaped() {
    let Some(s) = boxed(
        "box_written_text_reaches_the_host_terminal_escaped",
        "text",
        &[],
    ) else {
        return;
    };
    // OSC 52 (write the clipboard) and a carriage return that would hide the line.
    let (status, _, err) = s.sh(
        "text",
        "echo x > /workspace/x; agentbox commit -m \"$(printf 'ok\\033]52;c;cHduZWQ=\\007\\rfake')\"",
    );
    assert_eq!(status, 0, "{err}");
    for args in [&["log", "text"][..], &["show", "text", "HEAD"][..]] {
        let out = s.env.ok(args);
        assert!(
            !out.contains('\u{1b}') && !out.contains('\r') && !out.contains('\u{7}'),
            "{args:?}: {out:?}"
        );
        assert!(out.contains("ok\\u{1b}]52"), "{args:?}: {out}");
    }
    let json = s.env.json(&["log", "text"]);
    let last = json["nodes"]
        .as_array()
        .and_then(|n| n.last())
        .expect("a node");
    assert_eq!(last["message"], "ok\u{1b}]52;c;cHduZWQ=\u{7}\rfake");
}
