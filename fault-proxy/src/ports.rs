//! Loopback ports for black-box runs that start a relay (and a proxy in front of it) on a port
//! they pick and keep across restarts.

use std::hash::BuildHasher as _;
use std::net::{Ipv4Addr, SocketAddr};

/// The lowest port [`free_port`] draws (below it lie the well-known and registered services
/// most often configured by hand).
pub const PORT_FLOOR: u16 = 10_000;
/// Ports of `[PORT_FLOOR, ephemeral start)` tried before falling back to an ephemeral one.
pub const PORT_DRAWS: u64 = 64;

/// A port of 127.0.0.1 free now (bound and released), drawn from `[PORT_FLOOR, E)` where `E`
/// is the start of the kernel's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`),
/// which no outgoing connection's source port comes from: a run's many client connections can
/// then never take the relay's or the proxy's port between its pick and its bind, nor while the
/// relay is down between a kill and its restart. The pick and the bind still race with other
/// programs that bind such ports: a caller retries its start. An ephemeral port (the kernel's
/// pick) when that range is unknown or empty, or none of [`PORT_DRAWS`] draws is free. The
/// draws come from the standard library's per-process random hasher keys: which port a run
/// gets is no input of its verdict.
pub fn free_port() -> std::io::Result<SocketAddr> {
    if let Some(end) = ephemeral_start().filter(|e| *e > PORT_FLOOR) {
        let keys = std::hash::RandomState::new();
        let span = u64::from(end - PORT_FLOOR);
        for draw in 0..PORT_DRAWS {
            let offset = u16::try_from(keys.hash_one(draw) % span).unwrap_or_default();
            if let Ok(addr) =
                std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, PORT_FLOOR + offset))
                    .and_then(|l| l.local_addr())
            {
                return Ok(addr);
            }
        }
    }
    std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()
}

/// The first port of the kernel's ephemeral range, where the system says (Linux).
pub fn ephemeral_start() -> Option<u16> {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// How the wait for a started command's port ended ([`wait_listening`]).
#[derive(Debug)]
pub enum Started {
    /// The port accepts connections while the command runs (or after it exited successfully:
    /// a relay that daemonizes).
    Listening,
    /// The command exited first, with a failure, or successfully while nothing accepts.
    Exited(std::process::ExitStatus),
    /// Nothing accepted within the time given.
    NotListening,
}

/// Waits up to `within` (looking every `poll`) until `listen` accepts connections while
/// `child` runs. A command that exited with a failure is [`Started::Exited`] even when
/// something accepts on its port: that is another process's listener (the command's bind
/// failed), not the command's.
pub async fn wait_listening(
    listen: SocketAddr,
    mut child: Option<&mut std::process::Child>,
    within: std::time::Duration,
    poll: std::time::Duration,
) -> Started {
    let tries = within.as_millis() / poll.as_millis().max(1);
    for _ in 0..tries {
        let accepts = tokio::net::TcpStream::connect(listen).await.is_ok();
        let exited = child
            .as_mut()
            .and_then(|child| child.try_wait().ok().flatten());
        match exited {
            Some(status) if !(accepts && status.success()) => return Started::Exited(status),
            _ if accepts => return Started::Listening,
            _ => {}
        }
        tokio::time::sleep(poll).await;
    }
    Started::NotListening
}

/// Waits up to `within` (looking every `poll`) until nothing accepts on `listen`: a killed
/// process group dies asynchronously, and its successor would find the port still taken.
pub async fn wait_closed(
    listen: SocketAddr,
    within: std::time::Duration,
    poll: std::time::Duration,
) {
    let tries = within.as_millis() / poll.as_millis().max(1);
    for _ in 0..tries {
        if tokio::net::TcpStream::connect(listen).await.is_err() {
            return;
        }
        tokio::time::sleep(poll).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picked_ports_are_free_and_below_the_ephemeral_range() {
        let end = ephemeral_start().filter(|e| *e > PORT_FLOOR);
        for _ in 0..20 {
            let addr = free_port().unwrap();
            assert!(addr.ip().is_loopback());
            std::net::TcpListener::bind(addr).unwrap();
            if let Some(end) = end {
                assert!(
                    (PORT_FLOOR..end).contains(&addr.port()),
                    "{addr}: outside [{PORT_FLOOR}, {end})"
                );
            }
        }
    }
}
