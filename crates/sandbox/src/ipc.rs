//! Messages with file descriptors over `SOCK_SEQPACKET` unix sockets.
//!
//! Every message is one JSON document in one packet (message boundaries are kept by the
//! socket type), optionally carrying file descriptors (`SCM_RIGHTS`). The CLI, the
//! supervisor and a box's PID 1 all speak this: passing descriptors lets a command in a box
//! write straight to the caller's terminal or pipe, with no copying process in between.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Largest message accepted; argument vectors and environments fit easily.
pub const MAX_MESSAGE: usize = 256 * 1024;
/// Most descriptors one message carries (stdin, stdout, stderr, or a PTY master).
pub const MAX_FDS: usize = 4;

#[derive(Debug, thiserror::Error)]
pub enum IpcError {
    #[error("the other side closed the connection")]
    Closed,
    #[error("socket error: {0}")]
    Io(#[from] std::io::Error),
    #[error("malformed message: {0}")]
    Malformed(String),
}

impl From<rustix::io::Errno> for IpcError {
    fn from(e: rustix::io::Errno) -> Self {
        IpcError::Io(e.into())
    }
}

/// Send `msg` with `fds` attached.
pub fn send<T: Serialize>(
    sock: impl AsFd,
    msg: &T,
    fds: &[BorrowedFd<'_>],
) -> Result<(), IpcError> {
    let bytes = serde_json::to_vec(msg).map_err(|e| IpcError::Malformed(e.to_string()))?;
    if bytes.len() > MAX_MESSAGE {
        return Err(IpcError::Malformed(format!(
            "message of {} bytes exceeds the limit of {MAX_MESSAGE}",
            bytes.len()
        )));
    }
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(IpcError::Malformed(format!(
            "too many descriptors ({})",
            fds.len()
        )));
    }
    loop {
        match rustix::net::sendmsg(
            &sock,
            &[IoSlice::new(&bytes)],
            &mut control,
            SendFlags::NOSIGNAL,
        ) {
            Ok(_) => return Ok(()),
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::PIPE) | Err(rustix::io::Errno::CONNRESET) => {
                return Err(IpcError::Closed)
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Receive one message and the descriptors that came with it.
pub fn recv<T: DeserializeOwned>(sock: impl AsFd) -> Result<(T, Vec<OwnedFd>), IpcError> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let n = loop {
        match rustix::net::recvmsg(
            &sock,
            &mut [IoSliceMut::new(&mut buf)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Ok(r) => break r.bytes,
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::CONNRESET) => return Err(IpcError::Closed),
            Err(e) => return Err(e.into()),
        }
    };
    let mut fds = Vec::new();
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = msg {
            fds.extend(rights);
        }
    }
    if n == 0 {
        return Err(IpcError::Closed);
    }
    let msg = serde_json::from_slice(&buf[..n]).map_err(|e| IpcError::Malformed(e.to_string()))?;
    Ok((msg, fds))
}

/// A connected pair of `SOCK_SEQPACKET` sockets (close-on-exec).
pub fn pair() -> Result<(OwnedFd, OwnedFd), IpcError> {
    Ok(rustix::net::socketpair(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?)
}
