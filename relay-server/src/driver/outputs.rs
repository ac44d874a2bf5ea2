//! The relay's outputs, executed in order after each round: frames to the sockets' queues
//! (encoded once for a run of the same frame), closes, pushes to the worker, the answers of
//! requests and upgrades that waited, and what crosses to another shard's core.

use std::time::Duration;

use relay_core::handoff::Crossing;

use super::*;

/// What happens to one crossing on its way from one core to another: what a network between
/// processes may do to it. The hand-off protocol is built for all of it (a hand-off, an
/// acknowledgement or a notice lost is sent again; one repeated is answered as a repeat; one
/// delayed arrives after later ones), so a harness can check that it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transit {
    /// Handed to its core at once (what a server without a transit does).
    Deliver,
    /// Lost.
    Lose,
    /// Handed twice, one copy after the other.
    Twice,
    /// Handed after this long: later crossings may overtake it.
    Delay(Duration),
}

/// Decides what happens to each crossing ([`RelayServer::with_crossing_transit`](crate::RelayServer::with_crossing_transit)).
pub type CrossingTransit = Arc<dyn Fn(&Crossing) -> Transit + Send + Sync>;

/// Hands `c` to `peer`'s input queue without waiting; a full queue loses it.
fn hand(peer: &mpsc::Sender<Input>, to: usize, c: Crossing) {
    if let Err(e) = peer.try_send(Input::Cross(c)) {
        debug!(
            to,
            full = matches!(e, mpsc::error::TrySendError::Full(_)),
            "crossing dropped"
        );
    }
}

impl Core {
    /// Hands `c` to the core of its shard without waiting: a core never blocks on another
    /// (two that did could wait on each other). A full or gone core loses it, as a network
    /// would: hand-offs and notices are sent again, a forwarded request or a submission is
    /// answered by its timeout or its client's retry. A server with a transit passes `c`
    /// through it first.
    pub(super) fn cross(&self, c: Crossing) {
        let to = usize::from(c.to().0);
        let Some(peer) = self
            .peers
            .as_ref()
            .and_then(|p| p.borrow().get(to).and_then(|p| p.as_ref()?.upgrade()))
        else {
            match &self.remote {
                // A cluster node: another node serves that shard, or none does now.
                Some(remote) => self.to_remote(remote, c),
                None => debug!(to, "crossing for a core that is gone: dropped"),
            }
            return;
        };
        match self.transit.as_ref().map_or(Transit::Deliver, |t| t(&c)) {
            Transit::Deliver => hand(&peer, to, c),
            Transit::Lose => debug!(to, "crossing lost in transit"),
            Transit::Twice => {
                hand(&peer, to, c.clone());
                hand(&peer, to, c);
            }
            Transit::Delay(wait) => {
                // Held weakly, so that a delayed crossing never keeps a stopped core's
                // queue open.
                let peer = peer.downgrade();
                tokio::spawn(async move {
                    tokio::time::sleep(wait).await;
                    if let Some(peer) = peer.upgrade() {
                        hand(&peer, to, c);
                    }
                });
            }
        }
    }

    /// Sends `c` to the node serving its shard, through the transit when there is one (the
    /// network between nodes is the simulator's to fault, as between cores).
    fn to_remote(&self, remote: &RemoteSink, c: Crossing) {
        match self.transit.as_ref().map_or(Transit::Deliver, |t| t(&c)) {
            Transit::Deliver => remote(&c),
            Transit::Lose => debug!(to = c.to().0, "crossing lost in transit"),
            Transit::Twice => {
                remote(&c);
                remote(&c);
            }
            Transit::Delay(wait) => {
                let remote = Arc::clone(remote);
                tokio::spawn(async move {
                    tokio::time::sleep(wait).await;
                    remote(&c);
                });
            }
        }
    }

    /// Executes every queued output, in order; sockets whose queue is full are closed and
    /// reported disconnected (which may queue more outputs, drained in the same call).
    pub(super) fn drain(&mut self) {
        // The last frame encoded: the same frame to many sockets (a channel post's fan-out,
        // the same receipt to several) is encoded once and shared.
        let mut last: Option<(ServerFrame, Utf8Bytes)> = None;
        loop {
            let mut overflowed = Vec::new();
            while let Some(output) = self.relay.poll_output() {
                match output {
                    Output::Send { conn, frame } => {
                        if !self.send_frame(conn, frame, &mut last) {
                            overflowed.push(conn);
                        }
                    }
                    Output::Close { conn, reason } => {
                        if self.sockets.is_open(conn) {
                            debug!(conn = conn.0, ?reason, "closing socket");
                            let (code, text) = self.close_for(reason);
                            if let Some(metrics) = &self.metrics {
                                let kind = if code == CLOSE_NOT_LEADER {
                                    CloseKind::NotLeader
                                } else {
                                    close_kind(reason)
                                };
                                metrics.websocket_closed(kind);
                            }
                            self.sockets.close(conn, code, text);
                        }
                    }
                    Output::Push {
                        user,
                        target,
                        payload,
                    } => self.push(user, target, payload),
                    Output::Http { id, response } => {
                        debug!(status = response.status, "http response after a read");
                        self.parked.answer_http(id, response);
                    }
                    Output::Connect { conn, result } => self.connected(conn, result),
                    Output::Cross(c) => self.cross(c),
                    #[allow(
                        unreachable_patterns,
                        reason = "relay-core grows outputs; new ones are logged until handled"
                    )]
                    _ => debug!("relay output not handled by this shell yet"),
                }
            }
            if overflowed.is_empty() {
                return;
            }
            let now = self.clock.now();
            for conn in overflowed {
                self.relay.handle_disconnect(now, conn);
            }
        }
    }

    /// Queues `frame` on `conn` if it is open, encoded once for a run of the same frame
    /// (`last`: the frame encoded last, and its text); `false` when the socket's queue is full
    /// (it is then dropped).
    fn send_frame(
        &mut self,
        conn: ConnId,
        frame: ServerFrame,
        last: &mut Option<(ServerFrame, Utf8Bytes)>,
    ) -> bool {
        if !self.sockets.is_open(conn) {
            trace!(conn = conn.0, "frame for a socket already gone");
            return true;
        }
        trace!(conn = conn.0, frame = frame.frame_type(), "frame out");
        if let ServerFrame::Error(e) = &frame {
            debug!(
                conn = conn.0,
                code = e.error.as_str(),
                refused = e.ref_type.as_deref(),
                "error frame out"
            );
        }
        if let Some(metrics) = &self.metrics {
            metrics.frame_sent(&frame);
        }
        let text = match last {
            Some((f, text)) if *f == frame => text.clone(),
            _ => {
                let text = Utf8Bytes::from(frame.encode());
                *last = Some((frame, text.clone()));
                text
            }
        };
        self.deliver(conn, text)
    }

    /// The close code and reason of `reason`; a commit that failed because this relay's term
    /// ended (it was fenced: another relay leads now) closes like the end of the term, with
    /// 1012 "not the leader", not 1011.
    pub(super) fn close_for(&self, reason: CloseReason) -> (u16, &'static str) {
        let term_ended = self.term.as_ref().is_some_and(|t| t.end.ended().is_some());
        if reason == CloseReason::StorageFailure && term_ended {
            return (CLOSE_NOT_LEADER, "not the leader");
        }
        close_for(reason)
    }

    /// Queues an encoded frame on `conn`; `false` when the queue is full, in frames or in
    /// bytes (the socket is then dropped).
    pub(super) fn deliver(&mut self, conn: ConnId, text: Utf8Bytes) -> bool {
        match self.sockets.send(conn, text) {
            // Gone: the socket task ended; its Disconnect input is on its way.
            Sent::Queued | Sent::Gone => true,
            Sent::Full => {
                warn!(
                    conn = conn.0,
                    frames = OUTBOUND_QUEUE_CAPACITY,
                    bytes = self.sockets.queue_bytes(),
                    "socket is not reading: outbound queue full, closing it"
                );
                if let Some(metrics) = &self.metrics {
                    metrics.websocket_closed(CloseKind::TooSlow);
                }
                false
            }
        }
    }

    /// Hands a push to the worker; never waits (a full queue drops it, counted by the worker:
    /// pushes are best effort, the message waits in the relay for the next `sync`).
    pub(super) fn push(
        &mut self,
        user: UserUuid,
        target: relay_core::PushTarget,
        payload: wire::http::PushPayload,
    ) {
        let kind = target.kind();
        match &self.push {
            None => debug!(kind, "push output dropped: push delivery not configured"),
            Some(PushSink(worker)) => match worker.submit(user, target, payload) {
                // Unconfigured kinds were warned about once at startup; a full queue is
                // warned about by the worker (rate-limited).
                Submitted::Queued | Submitted::Unconfigured | Submitted::QueueFull => {}
                Submitted::Closed => warn!(kind, "push worker stopped: push dropped"),
            },
        }
    }
}
