//! The in-box `agentbox` of a Docker box: the static binary copied into its container
//! ([`inbox_bin`]), the stream its requests cross to the host ([`frame`]: one `docker exec`
//! of the in-box bridge, multiplexing its connections), the host's end answering them
//! ([`host`]) and the per-box process that runs it ([`keeper`]).
//!
//! Inside the box nothing differs from a local box: the in-box client connects to the
//! socket at `/run/agentbox/ctl/sock` (made by the bridge) and sends its typed request with
//! its stdin, stdout and stderr; the bridge forwards the request and writes the host's
//! answer to those descriptors.

pub mod frame;
pub mod host;
pub mod inbox_bin;
pub mod keeper;
