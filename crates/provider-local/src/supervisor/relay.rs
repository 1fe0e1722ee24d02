//! The in-box `agentbox`: its typed requests (see [`agentbox_boxes::relay`]), checked and answered
//! on the host by the front end's [`agentbox_boxes::relay::RelayHandler`], in this process — the
//! answer is written straight to the caller's own stdout and stderr.

use super::*;

/// Answer one in-box request: `fds` are the caller's stdin, stdout and stderr.
pub(super) fn relay(
    shared: &Shared,
    conn: &OwnedFd,
    call: agentbox_boxes::relay::RelayCall,
    fds: Vec<OwnedFd>,
) -> Result<()> {
    let [_stdin, stdout, stderr]: [OwnedFd; 3] = fds.try_into().map_err(|_| {
        BoxError::Supervisor("agentbox in a box must pass its stdin, stdout and stderr".into())
    })?;
    let stdout = std::fs::File::from(stdout);
    let mut stderr = std::fs::File::from(stderr);
    let status = match call.check() {
        Ok(()) => shared.relay.answer(&shared.name, call, stdout, stderr),
        Err(why) => {
            // Told on the caller's own stderr, with the usage exit status.
            let _ = std::io::Write::write_all(
                &mut stderr,
                format!("agentbox: error: {why}\n  hint: inside a box, agentbox acts on this box only\n")
                    .as_bytes(),
            );
            agentbox_core::exit::ExitCode::Usage.into()
        }
    };
    reply(
        conn,
        &Reply::Exited {
            status,
            node: None,
            killed_by_checkout: false,
            capture_error: None,
            killed_because: None,
        },
        &[],
    );
    Ok(())
}
