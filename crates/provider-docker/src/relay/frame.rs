//! The framing of a Docker box's relay stream: the in-box bridge and the host's relay
//! speak it over one `docker exec`'s stdin and stdout, each in-box connection being one
//! `conn` number.
//!
//! A frame is a 9-byte header — the payload's length (u32, big-endian), the connection
//! (u32, big-endian), the kind (u8) — then the payload:
//! * box → host: [`Kind::Call`], a [`agentbox_boxes::relay::RelayCall`] as JSON (at most
//!   [`MAX_CALL`] bytes);
//! * host → box: [`Kind::Out`] and [`Kind::Err`], bytes of the answer's stdout and stderr
//!   (at most [`MAX_CHUNK`] each), then [`Kind::Exit`], the status (i32, big-endian).
//!
//! The reader never holds more than one bounded payload: a frame over its bound, or of a
//! kind the reading side does not take, is reported as such and its bytes are dropped as
//! they come. The host ends a stream on such a frame (a forged header, whatever it claims,
//! cannot make it read what follows as frames) and starts the bridge again.

/// The most bytes of a call: the in-box socket's own bound on a message.
pub const MAX_CALL: usize = agentbox_sandbox::ipc::MAX_MESSAGE;
/// The most bytes of output in one frame.
pub const MAX_CHUNK: usize = 64 << 10;
/// The header's length.
pub const HEADER: usize = 9;

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Call = 1,
    Out = 2,
    Err = 3,
    Exit = 4,
}

impl Kind {
    fn of(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Call,
            2 => Kind::Out,
            3 => Kind::Err,
            4 => Kind::Exit,
            _ => return None,
        })
    }
}

/// One frame as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A whole frame of a kind the reader takes, within its bound.
    Whole {
        conn: u32,
        kind: Kind,
        payload: Vec<u8>,
    },
    /// A frame over the reader's bound (its length), skipped.
    Oversized { conn: u32, len: u64 },
    /// A frame of a kind the reader does not take (the kind's byte), skipped.
    Refused { conn: u32, kind: u8 },
}

/// `payload` as a frame of `kind` on connection `conn`.
pub fn encode(conn: u32, kind: Kind, payload: &[u8]) -> Vec<u8> {
    encode_raw(conn, kind as u8, payload)
}

/// [`encode`] with any kind byte (a test's malformed frame).
pub fn encode_raw(conn: u32, kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(
        &u32::try_from(payload.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    out.extend_from_slice(&conn.to_be_bytes());
    out.push(kind);
    out.extend_from_slice(payload);
    out
}

/// The status carried by an [`Kind::Exit`] payload (malformed: 1).
pub fn exit_status(payload: &[u8]) -> i32 {
    payload.try_into().map(i32::from_be_bytes).unwrap_or(1)
}

/// Reads frames out of a byte stream fed in pieces, taking only `takes` kinds, each at
/// most `max` bytes.
pub struct Reader {
    takes: &'static [Kind],
    max: usize,
    buf: Vec<u8>,
    /// Bytes of a skipped frame still to come.
    skipping: u64,
}

impl Reader {
    pub fn new(takes: &'static [Kind], max: usize) -> Reader {
        Reader {
            takes,
            max,
            buf: Vec::new(),
            skipping: 0,
        }
    }

    /// Feed `bytes`; the frames they complete, in order. A skipped frame is reported as
    /// soon as its header is read (its payload is then dropped as it comes).
    pub fn feed(&mut self, mut bytes: &[u8]) -> Vec<Frame> {
        let mut out = Vec::new();
        loop {
            if self.skipping > 0 {
                let n = usize::try_from(self.skipping)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                self.skipping -= n as u64;
                bytes = &bytes[n..];
                if self.skipping > 0 {
                    return out;
                }
            }
            // The header, then (within the bound) the payload, are gathered in `buf`.
            let want = if self.buf.len() < HEADER {
                HEADER
            } else {
                HEADER + self.len()
            };
            let n = (want - self.buf.len()).min(bytes.len());
            self.buf.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.buf.len() < want {
                return out;
            }
            if want == HEADER {
                let conn = self.conn();
                let byte = self.buf[8];
                let len = self.len();
                let skip = match Kind::of(byte).filter(|k| self.takes.contains(k)) {
                    None => Some(Frame::Refused { conn, kind: byte }),
                    Some(_) if len > self.max => Some(Frame::Oversized {
                        conn,
                        len: len as u64,
                    }),
                    Some(_) => None,
                };
                if let Some(frame) = skip {
                    self.buf.clear();
                    self.skipping = len as u64;
                    out.push(frame);
                    continue;
                }
                // A frame within bounds: its payload is gathered next (none for length 0).
                if len > 0 {
                    continue;
                }
            }
            let conn = self.conn();
            let kind = Kind::of(self.buf[8]).unwrap_or(Kind::Call);
            let payload = self.buf.split_off(HEADER);
            self.buf.clear();
            out.push(Frame::Whole {
                conn,
                kind,
                payload,
            });
        }
    }

    /// The payload length of the header in `buf`.
    fn len(&self) -> usize {
        let n = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
        usize::try_from(n).unwrap_or(usize::MAX)
    }

    /// The connection of the header in `buf`.
    fn conn(&self) -> u32 {
        u32::from_be_bytes([self.buf[4], self.buf[5], self.buf[6], self.buf[7]])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST_TAKES: &[Kind] = &[Kind::Call];

    #[test]
    fn frames_split_anywhere_come_out_whole_and_in_order() {
        let mut stream = encode(1, Kind::Call, b"{\"a\":1}");
        stream.extend(encode(7, Kind::Call, b""));
        stream.extend(encode(2, Kind::Call, &vec![b'x'; 1000]));
        for piece in [1, 2, 5, 9, 10, 333, stream.len()] {
            let mut r = Reader::new(HOST_TAKES, 4096);
            let mut got = Vec::new();
            for chunk in stream.chunks(piece) {
                got.extend(r.feed(chunk));
            }
            assert_eq!(got.len(), 3, "pieces of {piece}");
            assert_eq!(
                got[0],
                Frame::Whole {
                    conn: 1,
                    kind: Kind::Call,
                    payload: b"{\"a\":1}".to_vec()
                }
            );
            assert_eq!(
                got[1],
                Frame::Whole {
                    conn: 7,
                    kind: Kind::Call,
                    payload: Vec::new()
                }
            );
            assert!(
                matches!(&got[2], Frame::Whole { conn: 2, payload, .. } if payload.len() == 1000)
            );
        }
    }

    #[test]
    fn oversized_and_refused_frames_are_skipped_without_holding_them() {
        let mut stream = encode(3, Kind::Call, &vec![0u8; 5000]);
        stream.extend(encode(4, Kind::Out, b"not from a box"));
        stream.extend(encode_raw(5, 9, b"??"));
        stream.extend(encode(6, Kind::Call, b"ok"));
        let mut r = Reader::new(HOST_TAKES, 4096);
        let mut got = Vec::new();
        for chunk in stream.chunks(100) {
            got.extend(r.feed(chunk));
            assert!(r.buf.len() <= HEADER + 4096, "buffered {}", r.buf.len());
        }
        assert_eq!(
            got,
            vec![
                Frame::Oversized { conn: 3, len: 5000 },
                Frame::Refused { conn: 4, kind: 2 },
                Frame::Refused { conn: 5, kind: 9 },
                Frame::Whole {
                    conn: 6,
                    kind: Kind::Call,
                    payload: b"ok".to_vec()
                },
            ]
        );
    }

    #[test]
    fn a_length_claiming_gigabytes_is_skipped_as_it_comes() {
        let mut head = Vec::new();
        head.extend_from_slice(&u32::MAX.to_be_bytes());
        head.extend_from_slice(&1u32.to_be_bytes());
        head.push(Kind::Call as u8);
        let mut r = Reader::new(HOST_TAKES, 4096);
        assert_eq!(
            r.feed(&head),
            vec![Frame::Oversized {
                conn: 1,
                len: u64::from(u32::MAX)
            }]
        );
        assert!(r.feed(&vec![0u8; 1 << 20]).is_empty());
        assert!(r.buf.is_empty());
    }

    #[test]
    fn exit_status_round_trips() {
        let f = encode(1, Kind::Exit, &(-3i32).to_be_bytes());
        assert_eq!(exit_status(&f[HEADER..]), -3);
        assert_eq!(exit_status(b"x"), 1);
    }
}
