//! A session's terminal as the supervisor keeps it: a VT parser (`vt100`) fed everything the
//! session's process writes, holding the screen, the cursor, the modes and a scrollback of
//! [`SCROLLBACK_LINES`], and the redraw an attaching terminal is sent.
//!
//! The output is box-controlled bytes: nothing here interprets them beyond the parser, and
//! what goes back to a terminal is either those bytes or what the parser renders of them.

use agentbox_boxes::sessions::{clamp_size, SCROLLBACK_LINES};
use agentbox_sandbox::proto::WinSize;

/// Answers the questions a program asks its terminal (where the cursor is, what the
/// terminal is) while no terminal is attached to say it: a program started detached must
/// not wait forever for an answer. With a terminal attached, that terminal answers.
#[derive(Default)]
pub(super) struct Queries {
    /// The keyboard modes the program set (an attaching terminal is put in them).
    keys: crate::terminal::KeyModes,
    /// Answer now (no terminal is attached).
    answer: bool,
    /// Answers not yet written to the program.
    replies: Vec<u8>,
}

/// Most bytes of answers kept before they are written: a program that floods the screen
/// with questions gets no more.
const MAX_REPLIES: usize = 4096;

impl vt100::Callbacks for Queries {
    fn unhandled_csi(
        &mut self,
        screen: &mut vt100::Screen,
        i1: Option<u8>,
        _i2: Option<u8>,
        params: &[&[u16]],
        c: char,
    ) {
        self.keys.csi(i1, params, c);
        if !self.answer || self.replies.len() > MAX_REPLIES {
            return;
        }
        let first = params.first().and_then(|p| p.first()).copied().unwrap_or(0);
        match (i1, c, first) {
            // Device status report: the cursor's position (1-based).
            (None, 'n', 6) => {
                let (row, col) = screen.cursor_position();
                self.replies
                    .extend(format!("\x1b[{};{}R", row + 1, col + 1).into_bytes());
            }
            // Device status report: the terminal is fine.
            (None, 'n', 5) => self.replies.extend(b"\x1b[0n"),
            // Primary device attributes: a VT100 with advanced video.
            (None, 'c', 0) => self.replies.extend(b"\x1b[?1;2c"),
            _ => {}
        }
    }
}

/// One session's terminal state. Memory: the screen plus at most [`SCROLLBACK_LINES`]
/// rows of at most [`agentbox_boxes::sessions::MAX_COLS`] cells of 32 bytes.
pub(super) struct Screen {
    parser: vt100::Parser<Queries>,
}

fn dims(size: WinSize) -> (std::num::NonZeroU16, std::num::NonZeroU16) {
    let size = clamp_size(size);
    // `clamp_size` gives at least 1 of each.
    let one = std::num::NonZeroU16::MIN;
    (
        std::num::NonZeroU16::new(size.rows).unwrap_or(one),
        std::num::NonZeroU16::new(size.cols).unwrap_or(one),
    )
}

impl Screen {
    pub(super) fn new(size: WinSize) -> Screen {
        let (rows, cols) = dims(size);
        Screen {
            parser: vt100::Parser::new_with_callbacks(
                rows,
                cols,
                SCROLLBACK_LINES,
                Queries::default(),
            ),
        }
    }

    /// Take in what the program wrote; with `answer` (no terminal attached), the answers to
    /// the questions it asked its terminal, to be written back to it.
    pub(super) fn feed(&mut self, bytes: &[u8], answer: bool) -> Vec<u8> {
        self.parser.callbacks_mut().answer = answer;
        self.parser.process(bytes);
        std::mem::take(&mut self.parser.callbacks_mut().replies)
    }

    /// Text the supervisor itself shows in the session (a relaunch, say), as if the program
    /// had written it.
    pub(super) fn note(&mut self, text: &str) -> Vec<u8> {
        let bytes = format!("\r\n\x1b[0m[agentbox: {text}]\r\n").into_bytes();
        self.parser.callbacks_mut().answer = false;
        self.parser.process(&bytes);
        bytes
    }

    pub(super) fn resize(&mut self, size: WinSize) {
        let (rows, cols) = dims(size);
        self.parser.set_size(rows, cols);
    }

    pub(super) fn size(&self) -> WinSize {
        let (rows, cols) = self.parser.screen().size();
        WinSize {
            rows: rows.get(),
            cols: cols.get(),
        }
    }

    /// What an attaching terminal is sent so that it shows the session as it is now.
    ///
    /// For a terminal (`tty`): with `history`, the scrollback's rows (with their colours),
    /// so that they land in the terminal's own scrollback — only while the main screen is
    /// shown, the alternate one (full-screen programs) having no history; then enough
    /// newlines to push what the terminal showed into its scrollback; then the alternate
    /// screen switched on when the session is on it, the screen's contents, the cursor's
    /// position and visibility, the attributes and the input modes (keypad, cursor keys,
    /// bracketed paste, mouse reporting, the kitty keyboard protocol, modifyOtherKeys).
    ///
    /// Without a terminal: the text alone (the scrollback's with `history`, then the
    /// screen's), one line per row, trailing blank rows left out.
    pub(super) fn redraw(&mut self, tty: bool, history: bool) -> Vec<u8> {
        let mut out = String::new();
        let rows = self.size().rows;
        let alternate = self.parser.screen().alternate_screen();
        if history && !alternate {
            self.write_history(&mut out, tty);
        }
        if tty {
            out.push_str(&"\r\n".repeat(usize::from(rows)));
            if alternate {
                out.push_str("\x1b[?1049h");
            }
            out.push_str(&self.parser.screen().state_formatted());
            out.push_str(&self.parser.callbacks().keys.set_sequence());
        } else {
            let text = self.parser.screen().contents();
            let text = text.trim_end_matches('\n');
            if !text.is_empty() {
                out.push_str(text);
                out.push('\n');
            }
        }
        out.into_bytes()
    }

    /// The scrollback, oldest row first, each row on a line of its own.
    ///
    /// The parser shows its scrollback through a view (`set_scrollback`): it is moved one
    /// screenful at a time and put back at the live screen afterwards. Rows are rendered
    /// with a width one more than the screen's, which makes the parser render each row on
    /// its own (relative cursor moves within the row only, none into a previous row), as a
    /// stream of lines needs.
    fn write_history(&mut self, out: &mut String, tty: bool) {
        let screen = self.parser.screen_mut();
        let len = screen.scrollback_len();
        let (rows, cols) = screen.size();
        let (rows, cols) = (usize::from(rows.get()), cols.get());
        let mut done = 0;
        while done < len {
            let offset = len - done;
            screen.set_scrollback(offset);
            let take = rows.min(offset);
            if tty {
                for row in screen.rows_formatted(0, cols.saturating_add(1)).take(take) {
                    out.push_str(&row);
                    out.push_str("\x1b[m\r\n");
                }
            } else {
                for row in screen.rows(0, cols).take(take) {
                    out.push_str(row.trim_end());
                    out.push('\n');
                }
            }
            done += take;
        }
        screen.set_scrollback(0);
    }

    /// Whether the session shows its alternate screen now.
    #[cfg(test)]
    fn alternate(&self) -> bool {
        self.parser.screen().alternate_screen()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(bytes: &[u8], size: WinSize) -> vt100::Parser {
        let mut p = vt100::Parser::new(
            std::num::NonZeroU16::new(size.rows).expect("rows"),
            std::num::NonZeroU16::new(size.cols).expect("cols"),
            1000,
        );
        p.process(bytes);
        p
    }

    const SIZE: WinSize = WinSize { rows: 10, cols: 40 };

    #[test]
    fn a_redraw_shows_the_screen_and_cursor_where_they_were() {
        let mut s = Screen::new(SIZE);
        s.feed(b"\x1b[2J\x1b[5;5Hmark\x1b[8;3H", false);
        let shown = rendered(&s.redraw(true, true), SIZE);
        let screen = shown.screen();
        assert_eq!(
            screen.cell(4, 4).map(|c| c.contents().to_owned()),
            Some("m".to_owned())
        );
        assert_eq!(screen.cursor_position(), (7, 2));
    }

    #[test]
    fn the_alternate_screen_and_input_modes_come_back() {
        let mut s = Screen::new(SIZE);
        s.feed(b"main\x1b[?1049h\x1b[?2004h\x1b[?1hfull", false);
        assert!(s.alternate());
        let shown = rendered(&s.redraw(true, true), SIZE);
        assert!(shown.screen().alternate_screen());
        assert!(shown.screen().bracketed_paste());
        assert!(shown.screen().application_cursor());
        assert!(shown.screen().contents().starts_with("full"));
    }

    /// Every line a parser holds: its scrollback, oldest first, then its screen.
    fn all_lines(p: &mut vt100::Parser) -> Vec<String> {
        let len = p.screen().scrollback_len();
        let mut lines = Vec::new();
        for off in (1..=len).rev() {
            p.screen_mut().set_scrollback(off);
            lines.extend(p.screen().rows(0, SIZE.cols).next());
        }
        p.screen_mut().set_scrollback(0);
        lines.extend(p.screen().rows(0, SIZE.cols));
        lines.iter().map(|l| l.trim_end().to_owned()).collect()
    }

    #[test]
    fn history_lands_above_the_screen_in_order() {
        let mut s = Screen::new(SIZE);
        for i in 0..100 {
            s.feed(format!("\x1b[31mline {i}\x1b[m\r\n").as_bytes(), false);
        }
        let mut shown = rendered(&s.redraw(true, true), SIZE);
        let lines: Vec<String> = all_lines(&mut shown)
            .into_iter()
            .filter(|l| !l.is_empty())
            .collect();
        let expected: Vec<String> = (0..100).map(|i| format!("line {i}")).collect();
        // The scrollback's lines, then the screen's (drawn, not replayed).
        assert_eq!(lines, expected);
        // Colours stay.
        assert!(String::from_utf8_lossy(&s.redraw(true, true)).contains("\x1b[31m"));
        // Without a terminal: the text, in order.
        let plain = String::from_utf8(s.redraw(false, true)).expect("utf-8");
        let plain: Vec<&str> = plain.lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(plain, expected);
    }

    #[test]
    fn a_full_scrollback_redraws_quickly_and_stays_bounded() {
        let mut s = Screen::new(WinSize {
            rows: 50,
            cols: 200,
        });
        let line = format!("{}\r\n", "x".repeat(150));
        for _ in 0..(SCROLLBACK_LINES + 500) {
            s.feed(line.as_bytes(), false);
        }
        assert_eq!(s.parser.screen().scrollback_len(), SCROLLBACK_LINES);
        let started = std::time::Instant::now();
        let bytes = s.redraw(true, true);
        assert!(bytes.len() > SCROLLBACK_LINES * 150);
        // Generous: what matters is that it is not quadratic in the scrollback.
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn questions_are_answered_only_when_asked_to() {
        let mut s = Screen::new(SIZE);
        assert_eq!(s.feed(b"ab\x1b[6n", true), b"\x1b[1;3R");
        assert!(s.feed(b"\x1b[6n", false).is_empty());
        assert_eq!(s.feed(b"\x1b[c", true), b"\x1b[?1;2c");
        assert_eq!(s.feed(b"\x1b[5n", true), b"\x1b[0n");
    }

    #[test]
    fn sizes_are_clamped() {
        let mut s = Screen::new(WinSize { rows: 0, cols: 0 });
        assert_eq!(s.size(), WinSize { rows: 1, cols: 1 });
        s.resize(WinSize {
            rows: 9000,
            cols: 9000,
        });
        assert_eq!(
            s.size(),
            WinSize {
                rows: agentbox_boxes::sessions::MAX_ROWS,
                cols: agentbox_boxes::sessions::MAX_COLS
            }
        );
    }
}
