//! Terminal details both ends of a session attach need: the keyboard modes a program asks
//! its terminal for (which `vt100` does not keep, and which must be given back to a
//! terminal that attaches, and taken back from one that detaches), and recognising the
//! detach key in what a terminal sends, however the terminal encodes keys.

use agentbox_boxes::sessions::DetachKey;

/// The keyboard modes a program set on its terminal beyond what `vt100` tracks: the kitty
/// keyboard protocol's stack of flags (`CSI > f u` pushes, `CSI < n u` pops, `CSI = f ; m u`
/// changes the top) and xterm's modifyOtherKeys level (`CSI > 4 ; n m`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyModes {
    /// Kitty flags, innermost last; at most [`KITTY_STACK`].
    pub kitty: Vec<u16>,
    /// 0: off.
    pub modify_other_keys: u16,
}

/// Entries of the kitty stack kept (terminals keep a few; the oldest go first).
const KITTY_STACK: usize = 16;

impl KeyModes {
    /// Follow one CSI sequence the program wrote (as `vt100` reports those it does not
    /// handle).
    pub fn csi(&mut self, i1: Option<u8>, params: &[&[u16]], c: char) {
        let p = |i: usize| params.get(i).and_then(|p| p.first()).copied();
        match (i1, c) {
            (Some(b'>'), 'u') => {
                if self.kitty.len() >= KITTY_STACK {
                    self.kitty.remove(0);
                }
                self.kitty.push(p(0).unwrap_or(0));
            }
            (Some(b'<'), 'u') => {
                let n = usize::from(p(0).unwrap_or(1).max(1));
                let keep = self.kitty.len().saturating_sub(n);
                self.kitty.truncate(keep);
            }
            (Some(b'='), 'u') => {
                let flags = p(0).unwrap_or(0);
                if self.kitty.is_empty() {
                    self.kitty.push(0);
                }
                if let Some(top) = self.kitty.last_mut() {
                    match p(1).unwrap_or(1) {
                        2 => *top |= flags,
                        3 => *top &= !flags,
                        _ => *top = flags,
                    }
                }
            }
            (Some(b'>'), 'm') if p(0) == Some(4) => {
                self.modify_other_keys = p(1).unwrap_or(0);
            }
            _ => {}
        }
    }

    /// Escape sequences that put a terminal (with no such modes set) in these modes.
    pub fn set_sequence(&self) -> String {
        let mut s = String::new();
        if let Some(&top) = self.kitty.last().filter(|f| **f != 0) {
            s.push_str(&format!("\x1b[>{top}u"));
        }
        if self.modify_other_keys != 0 {
            s.push_str(&format!("\x1b[>4;{}m", self.modify_other_keys));
        }
        s
    }

    /// Escape sequences that take these modes back off a terminal.
    pub fn reset_sequence(&self) -> String {
        let mut s = String::new();
        if !self.kitty.is_empty() {
            s.push_str(&format!("\x1b[<{}u", self.kitty.len()));
        }
        if self.modify_other_keys != 0 {
            s.push_str("\x1b[>4m");
        }
        s
    }
}

impl vt100::Callbacks for KeyModes {
    fn unhandled_csi(
        &mut self,
        _: &mut vt100::Screen,
        i1: Option<u8>,
        _i2: Option<u8>,
        params: &[&[u16]],
        c: char,
    ) {
        self.csi(i1, params, c);
    }
}

/// Escape sequences that leave a terminal as it was before a session drew on it: the main
/// screen, the cursor shown, no attributes, no special input modes — given what `screen`
/// (the terminal's view of the session) and `keys` say was set.
pub fn restore_sequence(screen: &vt100::Screen, keys: &KeyModes) -> String {
    let mut s = String::from("\x1b[0m");
    if screen.alternate_screen() {
        s.push_str("\x1b[?1049l");
    }
    if screen.hide_cursor() {
        s.push_str("\x1b[?25h");
    }
    if screen.bracketed_paste() {
        s.push_str("\x1b[?2004l");
    }
    if screen.application_cursor() {
        s.push_str("\x1b[?1l");
    }
    if screen.application_keypad() {
        s.push_str("\x1b>");
    }
    if screen.mouse_protocol_mode() != vt100::MouseProtocolMode::None {
        s.push_str("\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?9l");
    }
    if screen.mouse_protocol_encoding() != vt100::MouseProtocolEncoding::Default {
        s.push_str("\x1b[?1006l\x1b[?1005l");
    }
    s.push_str(&keys.reset_sequence());
    s
}

/// One key (or other input) a terminal sent, as far as the detach key cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    /// The key's character: a byte's value, or a kitty/modifyOtherKeys code point (lower
    /// case for letters).
    code: u32,
    /// Ctrl was held (a control byte, or the Ctrl bit of an encoded key).
    ctrl: bool,
    /// Other modifiers (Shift, Alt, Super…; not Caps or Num Lock).
    other_mods: bool,
    /// A key release or repeat, or a modifier key itself (kitty's reporting modes): it
    /// neither completes nor cancels a detach sequence.
    neutral: bool,
}

/// The length of the token at the start of `buf` and the key it is (`None`: not a key
/// the detach key can be: another escape sequence, which is passed through whole).
fn token(buf: &[u8]) -> (usize, Option<Key>) {
    let plain = |b: u8| Key {
        code: u32::from(b),
        ctrl: b < 0x20,
        other_mods: false,
        neutral: false,
    };
    if buf.first() != Some(&0x1b) || buf.len() == 1 {
        return (1, buf.first().map(|&b| plain(b)));
    }
    match buf[1] {
        b'[' => {
            let body = &buf[2..];
            let Some(end) = body.iter().position(|b| (0x40..=0x7e).contains(b)) else {
                // Incomplete: passed on as it is.
                return (buf.len(), None);
            };
            let len = 2 + end + 1;
            let (params, fin) = (&body[..end], body[end]);
            (len, encoded_key(params, fin))
        }
        b'O' if buf.len() >= 3 => (3, None),
        _ => (2, None),
    }
}

/// The key of `CSI params fin`: kitty's `code[:alt...] ; mods[:event] u` or xterm's
/// modifyOtherKeys `27 ; mods ; code ~`.
fn encoded_key(params: &[u8], fin: u8) -> Option<Key> {
    let text = std::str::from_utf8(params).ok()?;
    if !text
        .bytes()
        .all(|b| b.is_ascii_digit() || b == b';' || b == b':')
    {
        return None;
    }
    let fields: Vec<Vec<u32>> = text
        .split(';')
        .map(|f| f.split(':').map(|n| n.parse().unwrap_or(0)).collect())
        .collect();
    let at = |i: usize, j: usize| fields.get(i).and_then(|f| f.get(j)).copied();
    let (code, mods, event) = match fin {
        b'u' => (at(0, 0)?, at(1, 0).unwrap_or(1), at(1, 1).unwrap_or(1)),
        b'~' if at(0, 0) == Some(27) => (at(2, 0)?, at(1, 0).unwrap_or(1), 1),
        _ => return None,
    };
    // Modifiers are sent as 1 + a bit set: shift 1, alt 2, ctrl 4, super 8, hyper 16,
    // meta 32, caps lock 64, num lock 128.
    let bits = mods.saturating_sub(1) & !(64 | 128);
    // Kitty's code points for the modifier keys themselves.
    let modifier_key = (57441..=57452).contains(&code);
    Some(Key {
        code,
        ctrl: bits & 4 != 0,
        other_mods: bits & !4 != 0,
        neutral: event != 1 || modifier_key,
    })
}

/// Whether `key` is the detach key's byte `want` (a control byte is its key with Ctrl).
fn is(key: &Key, want: u8) -> bool {
    if key.neutral || key.other_mods {
        return false;
    }
    if u32::from(want) == key.code && (want < 0x20) == key.ctrl {
        return true;
    }
    if want < 0x20 && key.ctrl {
        // Ctrl-A…Ctrl-Z are a…z with Ctrl; Ctrl-@ [ \ ] ^ _ are those characters.
        let base = if (1..=26).contains(&want) {
            want + 0x60
        } else {
            want + 0x40
        };
        return key.code == u32::from(base);
    }
    false
}

/// Finds the detach key in a terminal's input and passes everything else on.
pub struct DetachScanner {
    keys: Vec<u8>,
    /// The bytes held since the prefix key was pressed (sent on when the next key is not
    /// the second one).
    held: Option<Vec<u8>>,
}

impl DetachScanner {
    pub fn new(key: &DetachKey) -> DetachScanner {
        DetachScanner {
            keys: key.keys.clone(),
            held: None,
        }
    }

    /// The bytes of `input` to send to the session, and whether the detach key was
    /// pressed (then what followed it in `input` is dropped).
    pub fn feed(&mut self, input: &[u8]) -> (Vec<u8>, bool) {
        let mut out = Vec::with_capacity(input.len());
        if self.keys.is_empty() {
            out.extend_from_slice(input);
            return (out, false);
        }
        let mut i = 0;
        while i < input.len() {
            let (len, key) = token(&input[i..]);
            let bytes = &input[i..i + len];
            i += len;
            match (self.held.take(), key) {
                (None, Some(k)) if is(&k, self.keys[0]) => {
                    if self.keys.len() == 1 {
                        return (out, true);
                    }
                    self.held = Some(bytes.to_vec());
                }
                (None, _) => out.extend_from_slice(bytes),
                (Some(mut held), Some(k)) if k.neutral => {
                    held.extend_from_slice(bytes);
                    self.held = Some(held);
                }
                (Some(_), Some(k)) if is(&k, self.keys[1]) => return (out, true),
                // The prefix twice: the prefix, once.
                (Some(held), Some(k)) if is(&k, self.keys[0]) => out.extend_from_slice(&held),
                (Some(held), _) => {
                    out.extend_from_slice(&held);
                    out.extend_from_slice(bytes);
                }
            }
        }
        (out, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(key: &str, inputs: &[&[u8]]) -> (Vec<u8>, bool) {
        let mut s = DetachScanner::new(&DetachKey::parse(key).expect("key"));
        let mut all = Vec::new();
        for i in inputs {
            let (out, detach) = s.feed(i);
            all.extend(out);
            if detach {
                return (all, true);
            }
        }
        (all, false)
    }

    #[test]
    fn the_default_key_detaches_and_everything_else_passes() {
        assert_eq!(scan("ctrl-\\ d", &[b"abc\x1cd"]), (b"abc".to_vec(), true));
        // Split across reads.
        assert_eq!(
            scan("ctrl-\\ d", &[b"ab\x1c", b"dxyz"]),
            (b"ab".to_vec(), true)
        );
        // The prefix then another key: both go on.
        assert_eq!(scan("ctrl-\\ d", &[b"\x1cx"]), (b"\x1cx".to_vec(), false));
        // The prefix twice: once.
        assert_eq!(
            scan("ctrl-\\ d", &[b"\x1c\x1cd"]),
            (b"\x1cd".to_vec(), false)
        );
        // A 'd' alone, or in an escape sequence, is no detach.
        assert_eq!(
            scan("ctrl-\\ d", &[b"d\x1b[1;2d"]),
            (b"d\x1b[1;2d".to_vec(), false)
        );
        // Off.
        assert_eq!(scan("none", &[b"\x1cd"]), (b"\x1cd".to_vec(), false));
    }

    #[test]
    fn encoded_keys_are_recognised() {
        // Kitty: Ctrl-\ then d, with release events and the Ctrl key itself in between.
        assert_eq!(
            scan(
                "ctrl-\\ d",
                &[b"\x1b[57442;5u\x1b[92;5u\x1b[92;5:3u\x1b[100u"]
            ),
            (b"\x1b[57442;5u".to_vec(), true)
        );
        // xterm's modifyOtherKeys.
        assert_eq!(scan("ctrl-\\ d", &[b"\x1b[27;5;92~d"]), (Vec::new(), true));
        // Ctrl-Shift-\ is another key.
        assert_eq!(
            scan("ctrl-\\ d", &[b"\x1b[92;6ud"]),
            (b"\x1b[92;6ud".to_vec(), false)
        );
        // A one-key detach: Ctrl-] (or kitty's ] with Ctrl).
        assert_eq!(scan("ctrl-]", &[b"ab\x1d"]), (b"ab".to_vec(), true));
        assert_eq!(scan("ctrl-a d", &[b"\x1b[97;5ud"]), (Vec::new(), true));
    }

    #[test]
    fn key_modes_are_followed_set_and_reset() {
        let mut p = vt100::Parser::new_with_callbacks(
            std::num::NonZeroU16::new(5).expect("rows"),
            std::num::NonZeroU16::new(20).expect("cols"),
            0,
            KeyModes::default(),
        );
        p.process(b"\x1b[>1u\x1b[>3u\x1b[=1;2u\x1b[<u\x1b[>4;2m");
        assert_eq!(p.callbacks().kitty, vec![1]);
        assert_eq!(p.callbacks().modify_other_keys, 2);
        assert_eq!(p.callbacks().set_sequence(), "\x1b[>1u\x1b[>4;2m");
        p.process(b"\x1b[?1049h\x1b[?25l\x1b[?2004h\x1b[?1000h");
        let reset = restore_sequence(p.screen(), p.callbacks());
        for part in [
            "\x1b[?1049l",
            "\x1b[?25h",
            "\x1b[?2004l",
            "\x1b[?1000l",
            "\x1b[<1u",
            "\x1b[>4m",
        ] {
            assert!(reset.contains(part), "{reset:?} lacks {part:?}");
        }
        p.process(b"\x1b[<5u\x1b[>4m");
        assert_eq!(p.callbacks().reset_sequence(), "");
    }
}
