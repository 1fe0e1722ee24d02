//! The `agentbox` command.

fn main() {
    println!("agentbox {}", env!("CARGO_PKG_VERSION"));
}
