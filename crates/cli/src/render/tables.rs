//! Tables more than one command prints, or that print what a box controls: a box's
//! processes (`ps`), the per-repository results of `push` and `pull`, and columns padded to
//! their widest cell (`config`).

use agentbox_boxes::history::remote::RemoteResult;

use super::basic::{output, text, time};

/// The table of `agentbox ps`: running processes, then recent exits with their status and
/// the first lines of their output under them.
pub fn procs(procs: &[agentbox_boxes::types::ProcInfo]) -> String {
    let mut s = format!(
        "{:<5} {:<7} {:<6} {:<20} {:<18} COMMAND\n",
        "ID", "PID", "KIND", "STARTED", "STATE"
    );
    for p in procs {
        let state = match &p.exit {
            None => "running".to_owned(),
            Some(e) if e.killed_by_checkout => "killed by checkout".to_owned(),
            Some(e) => format!("exited {}", e.status),
        };
        s.push_str(&format!(
            "{:<5} {:<7} {:<6} {:<20} {:<18} {}\n",
            p.id,
            p.pid,
            format!("{:?}", p.kind).to_lowercase(),
            time(&p.started),
            state,
            text(&agentbox_boxes::types::render_command(&p.argv))
        ));
        for line in p.exit.iter().flat_map(|e| &e.output) {
            // A box's output is the box's text: its colours dropped, the rest escaped.
            s.push_str(&format!("      | {}\n", output(line)));
        }
    }
    s
}

/// A commit id as the tables show it: its first 12 characters, `-` for none.
pub fn short_tip(tip: Option<&str>) -> String {
    match tip {
        Some(t) => t[..12.min(t.len())].to_owned(),
        None => "-".to_owned(),
    }
}

/// The table of `push` and `pull`: one row per repository with its outcome.
pub fn remote_table(results: &[RemoteResult]) -> String {
    let mut s = format!(
        "{:<12} {:<28} {:<10} {:<13} RESULT\n",
        "REPO", "BRANCH", "REMOTE", "COMMIT"
    );
    for r in results {
        s.push_str(&format!(
            "{:<12} {:<28} {:<10} {:<13} {}\n",
            text(r.sub.as_deref().unwrap_or(".")),
            r.branch,
            r.remote,
            short_tip(r.commit.as_deref()),
            r.outcome.as_str()
        ));
    }
    s
}

/// Columns padded to their widest cell; the last column is not padded.
pub fn columns(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        s.trim_end().to_owned() + "\n"
    };
    let mut out = line(header.to_vec());
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out
}
