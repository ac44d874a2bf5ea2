//! WebSocket upgrades: handed to the relay, answered at once or, when the upgrade waits for a
//! read ahead, when the relay's `Output::Connect` comes; the socket opens when accepted.

use super::*;

impl Core {
    /// An upgrade to authenticate: refused while the server shuts down; otherwise numbered and
    /// handed to the relay, answered once its batch is committed, or kept until the relay
    /// answers it after a read ([`Core::connected`]).
    pub(super) fn connect(
        &mut self,
        now: UnixMs,
        ws: WsConnect,
        reply: oneshot::Sender<Result<Connected, HttpResponse>>,
    ) {
        if self.draining {
            let _ = reply.send(Err(shutting_down()));
            return;
        }
        let conn = ConnId(self.next_conn);
        self.next_conn += 1;
        let Some(answer) = self.relay.handle_connect_ahead(now, conn, ws) else {
            debug!(conn = conn.0, "websocket upgrade waits for a read");
            self.parked.connect(conn, reply);
            return;
        };
        match answer {
            Ok(accepted) => {
                let outbound = self.sockets.open(conn);
                let connected = Connected {
                    conn,
                    user: accepted.user,
                    subprotocol: accepted.subprotocol,
                    outbound,
                };
                // Answered once the batch is committed.
                self.answers.connects.push((reply, connected));
            }
            Err(refusal) => {
                debug!(status = refusal.status, "websocket refused");
                let _ = reply.send(Err(refusal));
            }
        }
    }

    /// The relay answered an upgrade that waited for a read ahead (after the commit of what it
    /// wrote): the socket opens, or the refusal goes back.
    pub(super) fn connected(
        &mut self,
        conn: ConnId,
        result: Result<relay_core::Accepted, HttpResponse>,
    ) {
        let now = self.clock.now();
        let Some(reply) = self.parked.take_connect(conn) else {
            // Refused already (the relay was rebuilt meanwhile): the session is not served.
            if result.is_ok() {
                self.relay.handle_disconnect(now, conn);
            }
            return;
        };
        let accepted = match result {
            Ok(_) if self.draining => {
                // Accepted while the server began to shut down: refused as a new upgrade is.
                self.relay.handle_disconnect(now, conn);
                let _ = reply.send(Err(shutting_down()));
                return;
            }
            Ok(accepted) => accepted,
            Err(refusal) => {
                debug!(status = refusal.status, "websocket refused after a read");
                let _ = reply.send(Err(refusal));
                return;
            }
        };
        let connected = Connected {
            conn,
            user: accepted.user,
            subprotocol: accepted.subprotocol,
            outbound: self.sockets.open(conn),
        };
        self.hand_over(reply, connected, now);
    }

    /// Completes an accepted upgrade: its socket task gets the connection; if the upgrade
    /// handler went away (client gone) before the answer, the socket and session are dropped.
    pub(super) fn hand_over(
        &mut self,
        reply: oneshot::Sender<Result<Connected, HttpResponse>>,
        connected: Connected,
        now: UnixMs,
    ) {
        let conn = connected.conn;
        if reply.send(Ok(connected)).is_err() {
            self.sockets.forget(conn);
            self.relay.handle_disconnect(now, conn);
        } else if let Some(metrics) = &self.metrics {
            metrics.websocket_opened();
        }
    }
}

/// The refusal of an upgrade while the server shuts down.
fn shutting_down() -> HttpResponse {
    HttpResponse::error(
        503,
        &wire::ErrorCode::SERVER_SHUTTING_DOWN,
        "the relay is shutting down; reconnect shortly",
    )
}
