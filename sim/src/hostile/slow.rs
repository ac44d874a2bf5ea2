//! The slow consumer: a raw client provokes answers and stops reading; the relay must close
//! its socket within [`STUCK_CLOSE_BOUND_MS`]. Seen from outside: the host's TCP stream count
//! drops (a relay that drops the socket resets it, its unread data makes it a RST).

use std::time::Duration;

use super::Findings;
use super::http::RawAccount;
use super::ws::{RawReader, RawWriter, op, open_ws, open_ws_at, ws_query};
use crate::bounds::{STUCK_CLOSE_BOUND_MS, STUCK_MIN_PROVOKE};
use crate::time::{sim_ms, sleep_ms};
use crate::violation::{Oracle, Violation};
use crate::world::{HostCtx, StuckRec};

/// A slow consumer that reads again and finds its socket closed must get a working new one
/// within this long (the relay may be restarting after a power-off: up to ~8 s, plus
/// rebuilds).
const RESUME_RECONNECT_MS: u64 = 30_000;
/// Pause between a slow consumer's provoking frames (longer than a link's latency, so the
/// relay answers each before the next arrives).
const STUCK_PROVOKE_PACE_MS: u64 = 20;
/// How long a slow consumer that reads again waits for its socket to drain, or to answer.
const ANSWER_WAIT_MS: u64 = 5_000;

/// A slow consumer: provoke answers, stop reading; the relay must close the socket within
/// [`STUCK_CLOSE_BOUND_MS`]. With a pause, read again afterwards: the socket must either
/// still work or have been closed (then a new one must work).
pub(super) async fn stop_reading(
    ctx: &HostCtx,
    host: &str,
    account: &RawAccount,
    provoke: u32,
    pause_ms: Option<u64>,
) -> Findings {
    // Straight to the active relay in the failover topology (in the cluster topology, to the
    // node serving the account): the bound is the relay's, and the buffers of a balancer or
    // a node passing the socket on in between would only need more answers to fill.
    let target = ctx.world.borrow().relay_serving(&account.uuid);
    let Ok(Ok((mut reader, mut writer))) = open_ws_at(&target, &ws_query(account)).await else {
        return Findings::new();
    };
    let before = turmoil::established_tcp_stream_count();
    let stopped = sim_ms();
    let blocked_at = provoke_answers(ctx, &mut writer, provoke).await;
    let deadline = stopped + STUCK_CLOSE_BOUND_MS;
    let resume = pause_ms.map(|p| stopped + p);
    let check_until = match resume {
        Some(r) if r < deadline => r,
        _ => deadline,
    };
    let closed_at = wait_for_reset(&mut writer, before, check_until).await;
    let must_close = resume.is_none_or(|r| r >= deadline) && provoke >= STUCK_MIN_PROVOKE;
    ctx.world.borrow_mut().stuck.push(StuckRec {
        host: host.to_owned(),
        stopped_ms: stopped,
        blocked_ms: blocked_at,
        closed_ms: closed_at,
        provoke,
        must_close,
    });
    let Some(resume) = resume else {
        // For good: keep the socket (and whatever the relay holds for it) to the end.
        std::future::pending::<()>().await;
        return Findings::new();
    };
    sleep_ms(resume.saturating_sub(sim_ms())).await;
    if reads_again(&mut reader, &mut writer).await || fresh_socket_works(account).await {
        return Findings::new();
    }
    vec![Violation::new(
        Oracle::StuckClient,
        format!("{host} resumed reading at {resume} ms but neither its socket nor a new one works"),
    )]
}

/// Sends `provoke` malformed frames, each answered with an error frame nobody reads; returns
/// when its writes blocked (the relay stopped reading it), if they did.
async fn provoke_answers(ctx: &HostCtx, writer: &mut RawWriter, provoke: u32) -> Option<u64> {
    for _ in 0..provoke {
        // Not during a slow commit: the answers would wait behind it and leave in one
        // clump, with one write.
        while ctx.world.borrow().relay_stalled {
            sleep_ms(super::POLL_MS).await;
        }
        if !writer.send(op::TEXT, b"{stuck").await {
            return Some(sim_ms());
        }
        // Paced so that each answer leaves the relay in a write of its own: the relay writes
        // every frame already queued for a socket with one flush, and turmoil's window
        // counts writes (segments), not bytes.
        sleep_ms(STUCK_PROVOKE_PACE_MS).await;
    }
    None
}

/// Reads again: drains what the relay sent, then checks the socket answers a frame.
async fn reads_again(reader: &mut RawReader, writer: &mut RawWriter) -> bool {
    let drain = async { while let Ok(Some(_)) = reader.next().await {} };
    let _ = tokio::time::timeout(Duration::from_millis(ANSWER_WAIT_MS), drain).await;
    answers(reader, writer).await
}

/// Whether the socket answers a malformed frame within [`ANSWER_WAIT_MS`].
async fn answers(reader: &mut RawReader, writer: &mut RawWriter) -> bool {
    writer.send(op::TEXT, b"{again").await
        && matches!(
            tokio::time::timeout(Duration::from_millis(ANSWER_WAIT_MS), reader.next()).await,
            Ok(Ok(Some(_)))
        )
}

/// The socket was closed meanwhile (allowed): a new one must work, once the relay is up (it
/// may be powered off or rebuilding right now: retried for [`RESUME_RECONNECT_MS`]).
async fn fresh_socket_works(account: &RawAccount) -> bool {
    let give_up = sim_ms() + RESUME_RECONNECT_MS;
    while sim_ms() < give_up {
        let again = open_ws(&ws_query(account)).await.ok();
        // A refusal of the token says the relay serves it: the token outlived its lifetime
        // meanwhile (the `days` class's clock moves by days).
        if matches!(again, Some(Err(401))) {
            return true;
        }
        if let Some(Ok((mut r, mut w))) = again
            && answers(&mut r, &mut w).await
        {
            return true;
        }
        sleep_ms(1_000).await;
    }
    false
}

/// Watches this host's sockets until simulated `until_ms`: `Some(ms)` when the count fell
/// below `before` (the relay dropped its end of the watched socket: turmoil removes a socket
/// when a reset arrives). A small write each round makes sure a close is seen however the
/// relay closed: after a reset it fails at once; after a FIN (which would wait behind the
/// unread data) the write reaches a host without that socket and is answered by a reset.
async fn wait_for_reset(writer: &mut RawWriter, before: usize, until_ms: u64) -> Option<u64> {
    while sim_ms() < until_ms {
        if turmoil::established_tcp_stream_count() < before {
            return Some(sim_ms());
        }
        let _ = writer.send(op::PING, b"").await;
        sleep_ms(250).await;
    }
    None
}

#[cfg(test)]
mod tests {
    //! The slow-consumer oracle's instrument, checked on a bare turmoil socket: a peer that
    //! drops a socket it can no longer write to is seen (both ways it can close), and one that
    //! keeps it is not.
    use std::time::Duration;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use turmoil::net::{TcpListener, TcpStream};

    use super::{RawWriter, wait_for_reset};

    /// How the peer behaves once its writes block.
    #[derive(Clone, Copy)]
    enum Peer {
        /// Drops the socket, never having read what the client sent (a reset goes out).
        DropsUnread,
        /// Reads everything, then drops the socket (a FIN goes out, behind the unread data).
        DropsAfterReading,
        /// Keeps the socket forever.
        Keeps,
    }

    fn watch(peer: Peer) -> Option<u64> {
        let mut sim = turmoil::Builder::new()
            .tcp_capacity(crate::bounds::TCP_CAPACITY)
            .simulation_duration(Duration::from_secs(120))
            .build();
        sim.host("peer", move || async move {
            let listener = TcpListener::bind("0.0.0.0:9000").await?;
            let (stream, _) = listener.accept().await?;
            let (mut read, mut write) = tokio::io::split(stream);
            let (mut held, mut reader) = (None, None);
            if matches!(peer, Peer::DropsAfterReading) {
                reader = Some(tokio::task::spawn_local(async move {
                    let mut buf = [0u8; 1024];
                    while matches!(read.read(&mut buf).await, Ok(n) if n > 0) {}
                    read
                }));
            } else {
                held = Some(read);
            }
            // Write until the window is full and the write blocks; give up after 2 s.
            let fill = async {
                loop {
                    if write.write_all(&[0u8; 32]).await.is_err() {
                        return;
                    }
                }
            };
            let _ = tokio::time::timeout(Duration::from_secs(2), fill).await;
            if matches!(peer, Peer::Keeps) {
                std::future::pending::<()>().await;
            }
            // Both halves go (as when the relay drops a socket task).
            drop(held);
            if let Some(reader) = reader {
                reader.abort();
                let _ = reader.await;
            }
            drop(write);
            std::future::pending::<()>().await;
            Ok(())
        });
        let seen = std::rc::Rc::new(std::cell::Cell::new(None));
        let out = std::rc::Rc::clone(&seen);
        sim.client("stuck", async move {
            let stream = TcpStream::connect("peer:9000").await?;
            let (_read, write) = tokio::io::split(stream);
            let mut writer = RawWriter {
                half: write,
                mask: 1,
            };
            let before = turmoil::established_tcp_stream_count();
            out.set(wait_for_reset(&mut writer, before, 60_000).await);
            Ok(())
        });
        sim.run().expect("simulation");
        seen.get()
    }

    #[test]
    fn a_reset_from_a_peer_that_never_read_is_seen() {
        assert!(watch(Peer::DropsUnread).is_some_and(|t| t < 10_000));
    }

    #[test]
    fn a_fin_behind_unread_data_is_seen_by_the_next_write() {
        assert!(watch(Peer::DropsAfterReading).is_some_and(|t| t < 10_000));
    }

    #[test]
    fn a_peer_that_keeps_the_socket_is_not_seen_closed() {
        assert_eq!(watch(Peer::Keeps), None);
    }
}
