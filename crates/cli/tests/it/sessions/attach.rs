//! Attaching: the screen redrawn, input forwarded, the exit status; detaching and
//! re-attaching; two terminals at once; a full-screen program; the terminal's size.

use super::*;

#[test]
fn an_attach_redraws_the_screen_forwards_input_and_ends_with_the_exit_status() {
    let Some(f) = Fixture::new(
        "an_attach_redraws_the_screen_forwards_input_and_ends_with_the_exit_status",
        "sess1",
    ) else {
        return;
    };
    f.start(
        "s",
        &[],
        &["sh", "-c", "echo hello; read x; echo got $x; exit 3"],
    );
    let mut t = f.attach("s");
    // Printed before anyone attached: the redraw shows it.
    t.expect("hello");
    t.type_(b"abc\r");
    t.expect("got abc");
    assert_eq!(t.wait(), 3, "the attach ends with the session's status");
    // Its end was seen by a terminal that is gone now: the session is too.
    assert!(f.session("s").is_none(), "{:?}", f.sessions());
    // Without -d, `session start` attaches at once.
    let mut fg = f.term(
        &[
            "session",
            "start",
            f.name,
            "--name",
            "fg",
            "--",
            "sh",
            "-c",
            "echo fg-up; read x; exit 5",
        ],
        24,
        80,
    );
    fg.expect("fg-up");
    fg.type_(b"q\r");
    assert_eq!(fg.wait(), 5);
    // Its process is one of the box's, of its own kind.
    f.start("listed", &[], &["sleep", "1003"]);
    let ps = f.env.json(&["ps", f.name]);
    assert!(
        ps.as_array().is_some_and(|a| a
            .iter()
            .any(|p| p["kind"] == "session" && p["argv"][1] == "1003")),
        "{ps}"
    );
}

#[test]
fn detaching_leaves_the_session_running_and_a_second_attach_redraws_it() {
    let Some(f) = Fixture::new(
        "detaching_leaves_the_session_running_and_a_second_attach_redraws_it",
        "sess2",
    ) else {
        return;
    };
    f.start(
        "loop",
        &[],
        &[
            "sh",
            "-c",
            "echo ready; while read x; do echo \"echo:$x\"; done",
        ],
    );
    let mut t = f.attach("loop");
    t.expect("ready");
    t.type_(b"one\r");
    t.expect("echo:one");
    assert_eq!(t.detach(), 0);
    t.expect_printed("detached from session loop");
    drop(t);
    f.wait_for("loop", "running with no client", |s| {
        s["state"] == "running" && s["clients"] == 0
    });
    let mut again = f.attach("loop");
    again.expect("echo:one");
    again.type_(b"two\r");
    again.expect("echo:two");
    assert_eq!(again.detach(), 0);
    // A detach key of one's own.
    let mut own = f.term(
        &["attach", f.name, "loop", "--detach-key", "ctrl-]"],
        24,
        80,
    );
    own.expect("echo:two");
    own.type_(b"\x1d");
    assert_eq!(own.wait(), 0);
    f.wait_for("loop", "still running", |s| s["state"] == "running");
}

#[test]
fn two_terminals_attached_at_once_both_see_the_output_and_both_type() {
    let Some(f) = Fixture::new(
        "two_terminals_attached_at_once_both_see_the_output_and_both_type",
        "sess3",
    ) else {
        return;
    };
    f.start(
        "shared",
        &[],
        &["sh", "-c", "while read x; do echo \"got:$x\"; done"],
    );
    let mut a = f.attach("shared");
    let mut b = f.attach("shared");
    f.wait_for("shared", "two clients", |s| s["clients"] == 2);
    a.type_(b"from-a\r");
    a.expect("got:from-a");
    b.expect("got:from-a");
    b.type_(b"from-b\r");
    a.expect("got:from-b");
    b.expect("got:from-b");
    assert_eq!(a.detach(), 0);
    f.wait_for("shared", "one client", |s| s["clients"] == 1);
    b.type_(b"still\r");
    b.expect("got:still");
    assert_eq!(b.detach(), 0);
}

#[test]
fn a_full_screen_program_is_redrawn_in_place_and_the_terminal_given_back() {
    let Some(f) = Fixture::new(
        "a_full_screen_program_is_redrawn_in_place_and_the_terminal_given_back",
        "sess4",
    ) else {
        return;
    };
    f.start(
        "full",
        &[],
        &[
            "sh",
            "-c",
            "printf '\\033[?1049h\\033[2J\\033[5;5Hmark\\033[?2004h'; sleep 1000",
        ],
    );
    for _ in 0..2 {
        let mut t = f.attach("full");
        t.expect_screen("mark at row 5, column 5", |s| {
            s.cell(4, 4).is_some_and(|c| c.contents() == "m")
                && s.contents()
                    .lines()
                    .nth(4)
                    .is_some_and(|l| l.trim() == "mark")
        });
        assert!(t.screen.screen().alternate_screen());
        assert!(t.screen.screen().bracketed_paste());
        assert_eq!(t.screen.screen().cursor_position(), (4, 8));
        assert_eq!(t.detach(), 0);
        // The terminal is given back as it was: main screen, no bracketed paste.
        assert!(!t.screen.screen().alternate_screen());
        assert!(!t.screen.screen().bracketed_paste());
    }
}

#[test]
fn the_session_follows_the_most_recent_terminals_size() {
    let Some(f) = Fixture::new(
        "the_session_follows_the_most_recent_terminals_size",
        "sess5",
    ) else {
        return;
    };
    f.start(
        "size",
        &[],
        &[
            "sh",
            "-c",
            "while read x; do echo \"size:$(stty size)\"; done",
        ],
    );
    let mut t = f.term(&["attach", f.name, "size"], 30, 100);
    t.type_(b"\r");
    t.expect("size:30 100");
    t.resize(40, 120);
    f.wait_for("size", "40x120", |s| {
        s["size"]["rows"] == 40 && s["size"]["cols"] == 120
    });
    t.type_(b"\r");
    t.expect("size:40 120");
    // A second terminal's attach makes its size the session's.
    let mut small = f.term(&["attach", f.name, "size"], 20, 60);
    small.type_(b"\r");
    small.expect("size:20 60");
    assert_eq!(small.detach(), 0);
    assert_eq!(t.detach(), 0);
}
