//! HTTP requests and WebSocket upgrades that read ahead (`crate::prefetch`): tried against the
//! rows read so far, parked on their first miss, answered by an output once they ran.

use std::sync::Arc;

use wire::UnixMs;

use super::{InputFailed, Relay, storage_unavailable};
use crate::handoff::ReplyTo;
use crate::http::{ApiError, HttpRequest, HttpResponse};
use crate::prefetch::{ReadOp, Waiter, Work};
use crate::shell::{Accepted, ConnId, Output, RequestId, WsConnect};

impl Relay {
    /// Handles one REST request, reading ahead ([`read_ahead`](Relay::read_ahead)): `Some` is
    /// its response, as [`handle_http`](Relay::handle_http) returns it (released after its
    /// commit); `None`: it waits for a read, and its response comes out later as
    /// [`Output::Http`] with `id` (after the commit of what it wrote). A relay that does not
    /// read ahead answers at once, as `handle_http` does. Drain `poll_output` afterwards.
    pub fn handle_request(
        &mut self,
        now: UnixMs,
        id: RequestId,
        req: HttpRequest,
    ) -> Option<HttpResponse> {
        if !self.prefetch.is_on() || self.failed {
            return self.http_now(now, &req, Some(id));
        }
        let mut charged = false;
        self.charge = None;
        let op = match self.attempt_http(now, &req, &mut charged) {
            Ok(result) => {
                let forwarded = self.forwarded(now, ReplyTo::Http(id.0));
                return self.end_http(result, None, forwarded);
            }
            Err(op) => op,
        };
        if let Err((code, words)) = self.prefetch.room_for_request(req.body.len()) {
            self.stats.frames_refused_waiting += 1;
            // Refused unserved: its budget's token goes back.
            if let Some((class, caller)) = self.charge.take() {
                self.budgets
                    .refund(class, caller.as_ref(), &req.remote_addr);
            }
            return Some(HttpResponse::error(503, &code, words));
        }
        probes::probe!("prefetch:request-parked");
        self.stats.requests_parked += 1;
        let work = Work::Http(Arc::new(req));
        self.prefetch.park(Waiter::Request(id), work, charged, op);
        None
    }

    /// Authenticates a WebSocket upgrade, reading ahead: `Some` is what
    /// [`handle_connect`](Relay::handle_connect) returns; `None`: it waits for a read, and
    /// the answer comes out later as [`Output::Connect`] for `conn` (the shell keeps `conn`
    /// for it meanwhile; nothing is sent to it before). A relay that does not read ahead
    /// answers at once.
    pub fn handle_connect_ahead(
        &mut self,
        now: UnixMs,
        conn: ConnId,
        req: WsConnect,
    ) -> Option<Result<Accepted, HttpResponse>> {
        if !self.prefetch.is_on() || self.failed {
            return Some(self.handle_connect(now, conn, &req));
        }
        match self.hold_upgrade(now, conn, req) {
            Ok(()) => None,
            Err(req) => self.connect_ahead(now, conn, req, false),
        }
    }

    /// Runs the upgrade `req` of `conn` against the rows read ahead and parks it on its first
    /// miss. `Some` is its answer, unless `later` (an upgrade held at the gate): then every
    /// answer comes out as [`Output::Connect`].
    pub(super) fn connect_ahead(
        &mut self,
        now: UnixMs,
        conn: ConnId,
        req: WsConnect,
        later: bool,
    ) -> Option<Result<Accepted, HttpResponse>> {
        let op = match self.attempt_connect(now, conn, &req) {
            Ok(result) => return self.end_connect(conn, result, later),
            Err(op) => op,
        };
        if let Err((code, words)) = self.prefetch.room_for_request(0) {
            self.stats.frames_refused_waiting += 1;
            let result = Err(HttpResponse::error(503, &code, words));
            if later {
                self.outputs.push_back(Output::Connect { conn, result });
                return None;
            }
            return Some(result);
        }
        probes::probe!("prefetch:upgrade-parked");
        self.stats.requests_parked += 1;
        self.prefetch
            .park(Waiter::Conn(conn), Work::Connect(req), false, op);
        None
    }

    /// A parked request runs again: `Some` is the read it needs next; else it ran and its
    /// response is staged.
    pub(super) fn resume_request(
        &mut self,
        now: UnixMs,
        id: RequestId,
        req: &HttpRequest,
        charged: &mut bool,
    ) -> Option<ReadOp> {
        match self.attempt_http(now, req, charged) {
            Ok(result) => {
                let forwarded = self.forwarded(now, ReplyTo::Http(id.0));
                let _ = self.end_http(result, Some(id), forwarded);
                None
            }
            Err(op) => {
                self.stats.requests_parked += 1;
                Some(op)
            }
        }
    }

    /// A parked upgrade runs again: `Some` is the read it needs next; else it ran and its
    /// answer is staged.
    pub(super) fn resume_connect(
        &mut self,
        now: UnixMs,
        conn: ConnId,
        req: &WsConnect,
    ) -> Option<ReadOp> {
        match self.attempt_connect(now, conn, req) {
            Ok(result) => {
                let _ = self.end_connect(conn, result, true);
                None
            }
            Err(op) => {
                self.stats.requests_parked += 1;
                Some(op)
            }
        }
    }

    /// Runs `req` against the rows read ahead. `Err`: it needs the read first, and nothing of
    /// the attempt is left but its budget's charge (`charged` says so: a request is charged
    /// once); `Ok`: it ran, and its input is still to be ended ([`Relay::end_http`]).
    fn attempt_http(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
        charged: &mut bool,
    ) -> Result<Result<HttpResponse, ApiError>, ReadOp> {
        let (stats, mark) = (self.stats, self.ids.mark());
        self.reading_ahead = true;
        self.request = self.forwards.next_id();
        let result = match crate::http::route(req.method, &req.path) {
            Ok(route) => self.dispatch_http(now, route, req, charged),
            Err(e) => Err(e),
        };
        self.reading_ahead = false;
        self.missed(stats, mark).map_or(Ok(result), |op| {
            self.request = None;
            Err(op)
        })
    }

    /// Runs `req` now, reading inline; `id` is its number when its answer may come later as
    /// [`Output::Http`] (then a rule may forward it to another shard, and `None` is
    /// returned: the answer comes with `id`).
    pub(super) fn http_now(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
        id: Option<RequestId>,
    ) -> Option<HttpResponse> {
        if self.failed {
            return Some(storage_unavailable().into_response());
        }
        self.request = id.and_then(|_| self.forwards.next_id());
        let result = match crate::http::route(req.method, &req.path) {
            Ok(route) => self.dispatch_http(now, route, req, &mut false),
            Err(e) => Err(e),
        };
        let forwarded = id.and_then(|id| self.forwarded(now, ReplyTo::Http(id.0)));
        self.request = None;
        self.end_http(result, None, forwarded)
    }

    /// Runs the upgrade `req` of `conn` against the rows read ahead, as
    /// [`Relay::attempt_http`].
    fn attempt_connect(
        &mut self,
        now: UnixMs,
        conn: ConnId,
        req: &WsConnect,
    ) -> Result<Result<Accepted, ApiError>, ReadOp> {
        let (stats, mark) = (self.stats, self.ids.mark());
        self.reading_ahead = true;
        let result = self.cx().connect(now, conn, req);
        self.reading_ahead = false;
        self.missed(stats, mark).map_or(Ok(result), Err)
    }

    /// After an attempt that began with `stats` and the random values at `mark`: the read it
    /// missed, if it may wait for it (it wrote and staged nothing; it is dropped,
    /// [`Relay::drop_attempt`]). A miss after a write cannot be undone: the attempt stands
    /// (answered as for a failed read).
    pub(super) fn missed(&mut self, stats: crate::stats::RelayStats, mark: u128) -> Option<ReadOp> {
        let op = self.prefetch.take_miss()?;
        if !self.state.batch().is_empty() || !self.staged.is_empty() {
            debug_assert!(false, "a rule wrote before its read of {op:?}");
            return None;
        }
        self.drop_attempt(stats, mark);
        Some(op)
    }

    /// What an attempt that began with `stats` and the random values at `mark` leaves once it
    /// is dropped to wait for a read: its counters go, but for the reads it made from the rows
    /// read ahead (work done, which its next run will not redo); its next run draws the random
    /// values it drew.
    pub(super) fn drop_attempt(&mut self, stats: crate::stats::RelayStats, mark: u128) {
        let tried = std::mem::replace(&mut self.stats, stats);
        self.stats.keep_reads(&tried);
        self.ids.rewind(mark);
    }

    /// Ends a request's input: commits (or joins the batch) and releases its response. A
    /// request that waited (`resumed`) gets it as [`Output::Http`] after the commit; one that
    /// did not gets it back (`Some`), as [`handle_http`](Relay::handle_http) returns it. A
    /// request `forwarded` to another shard gets its answer from there (it is waited for
    /// from then on, `Relay::handle_crossing`).
    pub(super) fn end_http(
        &mut self,
        result: Result<HttpResponse, ApiError>,
        resumed: Option<RequestId>,
        forwarded: Option<(u64, ReplyTo, UnixMs)>,
    ) -> Option<HttpResponse> {
        let response = result.unwrap_or_else(ApiError::into_response);
        let response = match (resumed, forwarded) {
            (_, Some(_)) => None,
            (Some(id), None) => {
                self.staged.push(Output::Http { id, response });
                None
            }
            (None, None) => Some(response),
        };
        match self.finish() {
            Ok(()) => {
                if let Some((id, reply, at)) = forwarded {
                    self.forwards.start(id, reply, at);
                }
                if !self.commits.in_batch() {
                    self.cx().collect_blobs();
                }
                response
            }
            Err(InputFailed) => {
                let refusal = storage_unavailable().into_response();
                let Some(id) = resumed else {
                    return Some(refusal);
                };
                let response = refusal;
                self.outputs.push_front(Output::Http { id, response });
                None
            }
        }
    }

    /// Ends an upgrade's input, as [`Relay::end_http`]: a parked one (`resumed`) is answered
    /// with [`Output::Connect`].
    fn end_connect(
        &mut self,
        conn: ConnId,
        result: Result<Accepted, ApiError>,
        resumed: bool,
    ) -> Option<Result<Accepted, HttpResponse>> {
        let result = result.map_err(ApiError::into_response);
        let result = if resumed {
            self.staged.push(Output::Connect { conn, result });
            None
        } else {
            Some(result)
        };
        match self.finish() {
            Ok(()) => result,
            Err(InputFailed) => {
                let refusal = Err(storage_unavailable().into_response());
                if resumed {
                    self.outputs.push_front(Output::Connect {
                        conn,
                        result: refusal,
                    });
                    return None;
                }
                Some(refusal)
            }
        }
    }
}
