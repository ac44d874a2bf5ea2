//! The load itself ([`run_relay_load`]): each pair's sender and recipient as the module
//! above describes them, the run's deadline, and its report.

use std::sync::Arc;
use std::time::{Duration, Instant};

use client_core::crypto::{decrypt_payload, encrypt_payload};
use futures_util::{SinkExt as _, StreamExt as _};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng as _;
use seam::net::WsMessage;
use serde_json::json;
use tokio::sync::{Barrier, mpsc};
use tokio::task::{JoinHandle, JoinSet};
use wire::ServerFrame;

use super::{BenchRelay, LOAD_DILATION, Pair, Peer, RelayLoadError, RelayWs, protocol};
use crate::{quantile, wall_now};

/// Shape of one bounded relay load run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayLoadConfig {
    /// Unmeasured messages per pair first (also proves every pair routes).
    pub warmup_msgs_per_pair: usize,
    /// Measured messages per pair.
    pub msgs_per_pair: usize,
    /// Plaintext bytes per message (encrypted with AES-256-GCM under the pair's session key).
    pub plaintext_bytes: usize,
    /// The recipient sends one `delivered` per this many messages (and one at the end).
    pub receipt_batch: usize,
    /// Messages a sender keeps unacknowledged (at least 1). 1: the closed loop of the module
    /// doc. More: the sender sends until that many wait for their `ack`, reads the next `ack`,
    /// and so on; delivery latencies are collected at the end (a client with an outbox).
    pub in_flight_per_pair: usize,
    /// Hard bound on the load (setup excluded).
    pub deadline: Duration,
}

/// Result of one relay load run.
#[derive(Debug, Clone, PartialEq)]
pub struct RelayLoadReport {
    /// Pairs used.
    pub pairs: usize,
    /// Measured messages (all pairs).
    pub messages: usize,
    /// Length of the `msg` text frame a sender sends (for an echo of the same size).
    pub frame_bytes: usize,
    /// From the first measured send to the last measured delivery.
    pub wall: Duration,
    delivery: Vec<Duration>,
    ack: Vec<Duration>,
}

impl RelayLoadReport {
    /// Delivered messages per second over the measured window.
    pub fn msgs_per_sec(&self) -> f64 {
        let secs = self.wall.as_secs_f64();
        if secs > 0.0 {
            self.messages as f64 / secs
        } else {
            0.0
        }
    }

    /// One-way latency (sender's send → recipient read the `msg`) at quantile `q`.
    pub fn delivery_quantile(&self, q: f64) -> Duration {
        quantile(&self.delivery, q)
    }

    /// Ack latency (send → the sender read its `ack`) at quantile `q`.
    pub fn ack_quantile(&self, q: f64) -> Duration {
        quantile(&self.ack, q)
    }
}

/// The `msg` frame text a sender sends.
fn msg_frame(id: &str, to: &str, conv: &str, payload: &str) -> String {
    format!(
        r#"{{"type":"msg","id":"{id}","to":"{to}","conv_id":"{conv}","crypto_v":1,"payload":"{payload}"}}"#
    )
}

/// Length of the `msg` frame of `pair` with `plaintext_bytes` of plaintext (for the echo).
pub fn msg_frame_len(pair: &Pair, plaintext_bytes: usize) -> usize {
    let mut rng = ChaCha20Rng::seed_from_u64(0);
    let payload = encrypt_payload(&pair.a.key, &vec![b'x'; plaintext_bytes], &mut rng);
    msg_frame("m0-0", &pair.b.alias, &pair.conv, &payload).len()
}

/// Runs every pair's closed loop (see the module doc) on `relay`; consumes the pairs and closes
/// their sockets at the end.
pub async fn run_relay_load(
    relay: &BenchRelay,
    pairs: Vec<Pair>,
    cfg: &RelayLoadConfig,
) -> Result<RelayLoadReport, RelayLoadError> {
    let n = pairs.len();
    let frame_bytes = pairs
        .first()
        .map_or(0, |p| msg_frame_len(p, cfg.plaintext_bytes));
    if let Some(clock) = &relay.clock {
        clock.set_factor(LOAD_DILATION);
    }
    let result = tokio::time::timeout(cfg.deadline, run_pairs(pairs, cfg)).await;
    if let Some(clock) = &relay.clock {
        clock.set_factor(1);
    }
    let runs = result.map_err(|_| RelayLoadError::Deadline(cfg.deadline))??;
    let mut delivery = Vec::with_capacity(n * cfg.msgs_per_pair);
    let mut ack = Vec::with_capacity(n * cfg.msgs_per_pair);
    let mut window: Option<(Instant, Instant)> = None;
    for run in runs {
        delivery.extend_from_slice(&run.delivery);
        ack.extend_from_slice(&run.ack);
        window = Some(match window {
            None => (run.start, run.end),
            Some((s, e)) => (s.min(run.start), e.max(run.end)),
        });
    }
    delivery.sort_unstable();
    ack.sort_unstable();
    Ok(RelayLoadReport {
        pairs: n,
        messages: delivery.len(),
        frame_bytes,
        wall: window.map_or(Duration::ZERO, |(s, e)| e.duration_since(s)),
        delivery,
        ack,
    })
}

struct PairRun {
    start: Instant,
    end: Instant,
    delivery: Vec<Duration>,
    ack: Vec<Duration>,
}

async fn run_pairs(
    pairs: Vec<Pair>,
    cfg: &RelayLoadConfig,
) -> Result<Vec<PairRun>, RelayLoadError> {
    let barrier = Arc::new(Barrier::new(pairs.len()));
    let mut settled = JoinSet::new();
    for (index, pair) in pairs.into_iter().enumerate() {
        let (tx, rx) = mpsc::unbounded_channel();
        let Pair { a, b, conv } = pair;
        let total = cfg.warmup_msgs_per_pair + cfg.msgs_per_pair;
        let to = b.alias.clone();
        let from = a.alias.clone();
        let recv = tokio::spawn(receiver(
            b,
            from,
            conv.clone(),
            total,
            cfg.receipt_batch.max(1),
            tx,
        ));
        let side = SenderSide {
            index,
            rng: ChaCha20Rng::seed_from_u64(index as u64),
            plaintext: crate::text_frame(cfg.plaintext_bytes).into_bytes(),
            peer: a,
            to,
            conv,
            cfg: cfg.clone(),
            delivered: rx,
            barrier: Arc::clone(&barrier),
        };
        let send = if cfg.in_flight_per_pair > 1 {
            tokio::spawn(sender_windowed(side))
        } else {
            tokio::spawn(sender(side))
        };
        settled.spawn(PairTasks { send, recv }.settle());
    }
    // The first pair that fails ends the run with its error (dropping the set aborts the
    // others): its partners wait at the barrier or for frames that never come, so waiting
    // for the pairs in order would only show the run's deadline.
    let mut runs = Vec::with_capacity(settled.len());
    while let Some(run) = settled.join_next().await {
        runs.push(run??);
    }
    Ok(runs)
}

/// A pair's two tasks, aborted when dropped (a run that failed leaves none behind).
struct PairTasks {
    send: JoinHandle<Result<PairRun, RelayLoadError>>,
    recv: JoinHandle<Result<(), RelayLoadError>>,
}

impl PairTasks {
    /// The pair's run once both sides are done, or the first error of either: the
    /// recipient's when both failed (the sender only sees that its recipient stopped; the
    /// recipient knows why).
    async fn settle(mut self) -> Result<PairRun, RelayLoadError> {
        tokio::select! {
            biased;
            recv = &mut self.recv => {
                recv??;
                (&mut self.send).await?
            }
            send = &mut self.send => match send? {
                Ok(run) => {
                    (&mut self.recv).await??;
                    Ok(run)
                }
                Err(e) => match tokio::time::timeout(RECIPIENT_GRACE, &mut self.recv).await {
                    Ok(Ok(Err(why))) => Err(why),
                    _ => Err(e),
                },
            },
        }
    }
}

impl Drop for PairTasks {
    fn drop(&mut self) {
        self.send.abort();
        self.recv.abort();
    }
}

/// How long a failed sender's recipient has to report why it stopped.
const RECIPIENT_GRACE: Duration = Duration::from_secs(1);

/// Reads server frames until the `ack` of `id`; receipts routed back to the sender are skipped.
async fn read_ack(ws: &mut RelayWs, id: &str) -> Result<(), RelayLoadError> {
    loop {
        match next_frame(ws).await? {
            ServerFrame::Ack(a) if a.id.as_str() == id => return Ok(()),
            other @ (ServerFrame::Ack(_) | ServerFrame::Error(_) | ServerFrame::Goaway(_)) => {
                return Err(protocol(format!("sender waiting for ack {id}: {other:?}")));
            }
            // Receipts, and notifications a client takes in passing: a `friend_accepted`
            // can come after the connect that follows the acceptance when the two accounts
            // live on different shards.
            _ => {}
        }
    }
}

/// The next decoded text frame (pings are answered by tungstenite).
async fn next_frame(ws: &mut RelayWs) -> Result<ServerFrame, RelayLoadError> {
    loop {
        match ws.next().await {
            Some(Ok(WsMessage::Text(text))) => {
                return ServerFrame::decode(text.as_str())
                    .map_err(|e| protocol(format!("undecodable server frame: {e}")));
            }
            Some(Ok(WsMessage::Ping(_) | WsMessage::Pong(_))) => {}
            Some(Err(e)) => return Err(e.into()),
            other => return Err(protocol(format!("socket ended: {other:?}"))),
        }
    }
}

/// What both senders hold: the pair's sending side and what tells it a message arrived.
struct SenderSide {
    index: usize,
    rng: ChaCha20Rng,
    plaintext: Vec<u8>,
    peer: Peer,
    to: String,
    conv: String,
    cfg: RelayLoadConfig,
    delivered: mpsc::UnboundedReceiver<(usize, Instant)>,
    barrier: Arc<Barrier>,
}

impl SenderSide {
    /// Message `i`'s id and `msg` frame: what a client does per message, encrypt and build the
    /// frame (inside the throughput).
    fn frame(&mut self, i: usize) -> (String, String) {
        let payload = encrypt_payload(&self.peer.key, &self.plaintext, &mut self.rng);
        let id = self.id(i);
        let frame = msg_frame(&id, &self.to, &self.conv, &payload);
        (id, frame)
    }

    /// Message `i`'s id.
    fn id(&self, i: usize) -> String {
        format!("m{}-{i}", self.index)
    }

    /// Ends the run (closing the socket, best effort: late receipts may still be in flight)
    /// with what it measured since `start`.
    async fn finish(
        &mut self,
        start: Instant,
        delivery: Vec<Duration>,
        ack: Vec<Duration>,
    ) -> PairRun {
        let end = wall_now();
        let _ = self.peer.ws.close(None).await;
        PairRun {
            start,
            end,
            delivery,
            ack,
        }
    }

    /// When the recipient read message `i` (messages arrive in order).
    async fn delivered(&mut self, i: usize) -> Result<Instant, RelayLoadError> {
        let index = self.index;
        let (got, at) = self
            .delivered
            .recv()
            .await
            .ok_or_else(|| protocol(format!("pair {index}: the recipient stopped")))?;
        if got != i {
            return Err(protocol(format!(
                "pair {index}: message {got} arrived, {i} expected"
            )));
        }
        Ok(at)
    }
}

async fn sender(mut s: SenderSide) -> Result<PairRun, RelayLoadError> {
    let cfg = s.cfg.clone();
    let total = cfg.warmup_msgs_per_pair + cfg.msgs_per_pair;
    let mut delivery = Vec::with_capacity(cfg.msgs_per_pair);
    let mut ack = Vec::with_capacity(cfg.msgs_per_pair);
    let mut start = wall_now();
    for i in 0..total {
        let measured = i >= cfg.warmup_msgs_per_pair;
        if i == cfg.warmup_msgs_per_pair {
            s.barrier.wait().await;
            start = wall_now();
        }
        let (id, frame) = s.frame(i);
        let t0 = wall_now();
        s.peer.ws.send(WsMessage::text(frame)).await?;
        read_ack(&mut s.peer.ws, &id).await?;
        let acked = t0.elapsed();
        let at = s.delivered(i).await?;
        if measured {
            ack.push(acked);
            delivery.push(at.saturating_duration_since(t0));
        }
    }
    Ok(s.finish(start, delivery, ack).await)
}

/// A sender with up to `cfg.in_flight_per_pair` messages unacknowledged (acks come back in
/// order on one connection); the warm-up is acknowledged before the measured messages start.
async fn sender_windowed(mut s: SenderSide) -> Result<PairRun, RelayLoadError> {
    let cfg = s.cfg.clone();
    let total = cfg.warmup_msgs_per_pair + cfg.msgs_per_pair;
    let mut sent_at: Vec<Instant> = Vec::with_capacity(total);
    let mut ack = Vec::with_capacity(cfg.msgs_per_pair);
    let mut start = wall_now();
    let mut acked = 0usize;
    while acked < total {
        while sent_at.len() < total && sent_at.len() - acked < cfg.in_flight_per_pair {
            let i = sent_at.len();
            if i == cfg.warmup_msgs_per_pair {
                if acked < i {
                    break;
                }
                s.barrier.wait().await;
                start = wall_now();
            }
            let (_, frame) = s.frame(i);
            sent_at.push(wall_now());
            s.peer.ws.send(WsMessage::text(frame)).await?;
        }
        let id = s.id(acked);
        read_ack(&mut s.peer.ws, &id).await?;
        if acked >= cfg.warmup_msgs_per_pair {
            ack.push(sent_at[acked].elapsed());
        }
        acked += 1;
    }
    let mut delivery = Vec::with_capacity(cfg.msgs_per_pair);
    for (i, sent) in sent_at.iter().enumerate() {
        let at = s.delivered(i).await?;
        if i >= cfg.warmup_msgs_per_pair {
            delivery.push(at.saturating_duration_since(*sent));
        }
    }
    Ok(s.finish(start, delivery, ack).await)
}

async fn receiver(
    mut peer: Peer,
    from: String,
    conv: String,
    total: usize,
    batch: usize,
    delivered: mpsc::UnboundedSender<(usize, Instant)>,
) -> Result<(), RelayLoadError> {
    for i in 0..total {
        let m = loop {
            match next_frame(&mut peer.ws).await? {
                ServerFrame::Msg(m) => break m,
                other @ (ServerFrame::Error(_) | ServerFrame::Goaway(_)) => {
                    return Err(protocol(format!("recipient: {other:?}")));
                }
                // As the sender's (`read_ack`).
                _ => {}
            }
        };
        let at = wall_now();
        // The recipient tells its sender only after reading the frame; the decrypt (what the
        // app does next) is outside the one-way latency but inside the throughput.
        let _ = delivered.send((i, at));
        decrypt_payload(&peer.key, &m.payload)
            .map_err(|e| protocol(format!("decrypting message {i}: {e}")))?;
        if m.from.as_str() != from {
            return Err(protocol(format!("message from {} not {from}", m.from)));
        }
        if (i + 1) % batch == 0 || i + 1 == total {
            let receipt = json!({
                "type": "delivered",
                "conv_id": conv,
                "seq": m.seq,
                "to": from,
                "crypto_v": 1,
            });
            peer.ws.send(WsMessage::text(receipt.to_string())).await?;
        }
    }
    let _ = peer.ws.close(None).await;
    Ok(())
}
