//! What the core task owes the handlers: the answers of a batch's inputs, sent once the batch
//! is committed ([`Answers`]), and the replies of requests and upgrades that wait for a read
//! ahead, sent when the relay answers them with an output ([`Parked`]).

use std::collections::BTreeMap;

use relay_core::{ConnId, HttpResponse, RequestId};
use tokio::sync::oneshot;
use wire::UnixMs;

use super::Connected;

/// The answers of a batch's inputs, sent once the batch is committed.
#[derive(Default)]
pub(super) struct Answers {
    pub(super) http: Vec<(oneshot::Sender<HttpResponse>, HttpResponse)>,
    pub(super) connects: Vec<(oneshot::Sender<Result<Connected, HttpResponse>>, Connected)>,
    /// Test mode: clock moves, answered with the new now.
    pub(super) clock: Vec<(oneshot::Sender<UnixMs>, UnixMs)>,
}

impl Answers {
    /// Answers every request and upgrade with `refusal()`; returns how many.
    pub(super) fn refuse(self, refusal: fn() -> HttpResponse) -> usize {
        let n = self.http.len() + self.connects.len();
        for (reply, _) in self.http {
            let _ = reply.send(refusal());
        }
        for (reply, _) in self.connects {
            let _ = reply.send(Err(refusal()));
        }
        // Clock moves: dropping the reply makes the handler answer with the server's refusal.
        n
    }
}

/// The reply of each HTTP request and WebSocket upgrade that waits for a read ahead
/// (`Relay::handle_request` or `Relay::handle_connect_ahead` returned `None`), until the
/// relay's `Output::Http` / `Output::Connect` answers it.
#[derive(Default)]
pub(super) struct Parked {
    http: BTreeMap<RequestId, oneshot::Sender<HttpResponse>>,
    connects: BTreeMap<ConnId, oneshot::Sender<Result<Connected, HttpResponse>>>,
    next: u64,
}

impl Parked {
    /// The number the next request is handed to the relay with.
    pub(super) fn next_id(&mut self) -> RequestId {
        self.next += 1;
        RequestId(self.next)
    }

    /// Request `id` waits: `reply` is answered by the relay's output for it.
    pub(super) fn http(&mut self, id: RequestId, reply: oneshot::Sender<HttpResponse>) {
        self.http.insert(id, reply);
    }

    /// The upgrade of `conn` waits.
    pub(super) fn connect(
        &mut self,
        conn: ConnId,
        reply: oneshot::Sender<Result<Connected, HttpResponse>>,
    ) {
        self.connects.insert(conn, reply);
    }

    /// The relay answered request `id` (an answer to one refused already is dropped).
    pub(super) fn answer_http(&mut self, id: RequestId, response: HttpResponse) {
        if let Some(reply) = self.http.remove(&id) {
            let _ = reply.send(response);
        }
    }

    /// The reply of `conn`'s upgrade, if it still waits.
    pub(super) fn take_connect(
        &mut self,
        conn: ConnId,
    ) -> Option<oneshot::Sender<Result<Connected, HttpResponse>>> {
        self.connects.remove(&conn)
    }

    /// Answers everything that waits with `refusal()`; returns how many.
    pub(super) fn refuse(&mut self, refusal: fn() -> HttpResponse) -> usize {
        let n = self.http.len() + self.connects.len();
        for (_, reply) in std::mem::take(&mut self.http) {
            let _ = reply.send(refusal());
        }
        for (_, reply) in std::mem::take(&mut self.connects) {
            let _ = reply.send(Err(refusal()));
        }
        n
    }
}
