//! The relay's side of reads ahead (`crate::prefetch`): a frame tried against the rows read
//! so far and parked on its first miss, the reads handed to the shell, a read's return running
//! the frames that waited for it, and the refusal of a frame that cannot wait.

use wire::frames::ErrorFrame;
use wire::{ErrorCode, ServerFrame, UnixMs};

use crate::http::HttpResponse;

use super::Relay;
use crate::handoff::Crossing;
use crate::prefetch::{ReadDone, ReadOp, ReadRequest, Reparked, Waiter, Work};
use crate::shell::{ConnId, Output};

impl Relay {
    /// Runs `frame` of `conn` against the rows read ahead. `Some`: it needs the read `op`
    /// first, and nothing of the attempt is left (its outputs and counters are dropped; its
    /// rules read before they write, so it wrote nothing).
    pub(super) fn attempt(
        &mut self,
        now: UnixMs,
        conn: ConnId,
        frame: wire::ClientFrame,
    ) -> Option<ReadOp> {
        let (stats, mark) = (self.stats, self.ids.mark());
        self.reading_ahead = true;
        let missed = self.run_frame(now, conn, frame);
        self.reading_ahead = false;
        if missed.is_some() {
            self.drop_attempt(stats, mark);
            self.stats.frames_parked += 1;
        }
        missed
    }

    /// What another shard sent, read ahead: queued behind the crossings that wait for reads
    /// (in the order they came), else tried against the rows read so far and parked on its
    /// first miss. One that finds [`MAX_PARKED_CROSSINGS`](crate::prefetch::MAX_PARKED_CROSSINGS)
    /// waiting is dropped, as a full input queue drops it: its sender sends again what the
    /// hand-off needs.
    pub(super) fn cross_ahead(&mut self, now: UnixMs, c: Crossing) {
        if self.prefetch.crossings_wait() {
            if !self.prefetch.queue_crossing(c) {
                self.stats.crossings_dropped_waiting += 1;
            }
            return;
        }
        if let Some(op) = self.attempt_crossing(now, c.clone()) {
            self.prefetch
                .park(Waiter::Crossings, Work::Cross(Box::new(c)), true, op);
        }
    }

    /// Runs crossing `c` against the rows read ahead, as [`attempt`](Relay::attempt) runs a
    /// frame. `Some`: it needs the read `op` first, and nothing of the attempt is left.
    fn attempt_crossing(&mut self, now: UnixMs, c: Crossing) -> Option<ReadOp> {
        let (stats, mark) = (self.stats, self.ids.mark());
        self.reading_ahead = true;
        self.cx().on_crossing(now, c);
        self.reading_ahead = false;
        if let Some(op) = self.prefetch.take_miss() {
            if self.state.batch().is_empty() {
                self.staged.clear();
                self.drop_attempt(stats, mark);
                probes::probe!("prefetch:crossing-parked");
                self.stats.crossings_parked += 1;
                return Some(op);
            }
            // A rule wrote before it read: the attempt stands (as for a failed read).
            debug_assert!(false, "a rule wrote before its read of {op:?}");
        }
        let _ = self.finish();
        None
    }

    /// The read `done` came back: what was parked on it runs again, in the order it was
    /// parked (a connection's frames followed by those queued behind them, until one needs
    /// another read; a request or an upgrade, whose answer comes out as an output). Drain
    /// `poll_output` afterwards, as after any input.
    pub fn handle_read(&mut self, now: UnixMs, done: ReadDone) {
        self.prefetch.complete(done);
        while let Some(w) = self.prefetch.next_ready() {
            self.resume(now, w);
        }
        // A crossing that waited may have brought the levels a held upgrade waits for.
        self.open_gate(now);
    }

    /// Runs `w`'s waiting work in order until some needs another read; a connection its
    /// client closed meanwhile is dropped once none waits.
    fn resume(&mut self, now: UnixMs, w: Waiter) {
        self.run_waiting(now, w);
        if let Waiter::Conn(conn) = w
            && self.prefetch.closed(conn)
        {
            self.cx().drop_conn(conn);
        }
    }

    fn run_waiting(&mut self, now: UnixMs, w: Waiter) {
        while let Some(work) = self.prefetch.head(w) {
            if self.failed {
                self.prefetch.forget(w);
                return;
            }
            let missed = match (w, work) {
                (Waiter::Conn(conn), Work::Frame(frame)) => {
                    if self.prefetch.head_uncharged(w) {
                        if !self.admit(now, conn) {
                            // Over its budget (closed), or the relay closed it meanwhile.
                            self.prefetch.forget(w);
                            return;
                        }
                        self.prefetch.head_charged(w);
                    }
                    self.attempt(now, conn, frame)
                }
                (Waiter::Conn(conn), Work::Connect(req)) => self.resume_connect(now, conn, &req),
                (Waiter::Sweep, Work::Sweep(at)) => self.resume_sweep(now, at),
                (Waiter::Crossings, Work::Cross(c)) => self.attempt_crossing(now, *c),
                (Waiter::Request(id), Work::Http(req)) => {
                    let mut charged = !self.prefetch.head_uncharged(w);
                    let missed = self.resume_request(now, id, &req, &mut charged);
                    if charged {
                        self.prefetch.head_charged(w);
                    }
                    missed
                }
                // A waiter holds its own kind of work only.
                _ => None,
            };
            let Some(op) = missed else {
                self.prefetch.ran(w);
                continue;
            };
            match self.prefetch.parked_again(w, op) {
                Reparked::Waiting => return,
                Reparked::TooManyRounds(work, (code, words)) => {
                    self.refuse_work(w, &work, code, words);
                }
            }
        }
    }

    /// Refuses `work` of `w`, which cannot wait for its reads: a frame with an error frame, a
    /// request or an upgrade with its response (a bound of `crate::prefetch`, which chose the
    /// code and counted the refusal's probe).
    pub(super) fn refuse_work(&mut self, w: Waiter, work: &Work, code: ErrorCode, words: &str) {
        match (w, work) {
            (Waiter::Conn(conn), Work::Frame(frame)) => {
                self.refuse_waiting(conn, frame, code, words);
            }
            (Waiter::Conn(conn), Work::Connect(_)) => {
                self.stats.frames_refused_waiting += 1;
                let result = Err(HttpResponse::error(503, &code, words));
                self.outputs.push_back(Output::Connect { conn, result });
            }
            (Waiter::Request(id), Work::Http(_)) => {
                self.stats.frames_refused_waiting += 1;
                let response = HttpResponse::error(503, &code, words);
                self.outputs.push_back(Output::Http { id, response });
            }
            // Its sender sends again what the hand-off needs.
            (Waiter::Crossings, Work::Cross(_)) => self.stats.crossings_dropped_waiting += 1,
            // The sweeps refuse no one: they start again at the next timeout, where they
            // stood.
            _ => {}
        }
    }

    /// Refuses `frame` of `conn`, which cannot wait for its reads (a bound of
    /// `crate::prefetch`, which chose the code and counted the refusal's probe). A refused
    /// `sync` closes the connection too, as one whose reads failed does (`Cx::refuse_sync`).
    pub(super) fn refuse_waiting(
        &mut self,
        conn: ConnId,
        frame: &wire::ClientFrame,
        code: ErrorCode,
        words: &str,
    ) {
        use wire::ClientFrame as F;
        self.stats.frames_refused_waiting += 1;
        if matches!(frame, F::Sync(_)) {
            self.prefetch.forget(Waiter::Conn(conn));
            self.cx().refuse_sync(conn, code);
            let _ = self.finish();
            return;
        }
        let id = match frame {
            F::Msg(m) => Some(m.id.to_string()),
            F::Retract(r) => Some(r.id.to_string()),
            _ => None,
        };
        let frame = ErrorFrame {
            error: code,
            message: words.into(),
            ref_type: Some(frame.frame_type().to_owned()),
            id,
        };
        self.cx().send(conn, ServerFrame::Error(frame));
        let _ = self.finish();
    }

    /// Reads ahead from now on: a frame's rules never read the store on the caller's thread;
    /// a frame that needs a row not in memory is parked, and the read is asked of the shell
    /// ([`poll_read`](Relay::poll_read), [`ReadRequest::run`] on a reader of its own, off this
    /// thread, then [`handle_read`](Relay::handle_read)). See `crate::prefetch`. HTTP
    /// requests and upgrades read ahead when they come through
    /// [`handle_request`](Relay::handle_request) and
    /// [`handle_connect_ahead`](Relay::handle_connect_ahead); the timed sweeps wait for their
    /// reads the same way ([`handle_timeout`](Relay::handle_timeout)).
    pub fn read_ahead(&mut self) {
        self.prefetch.turn_on();
    }

    /// The next read for the shell to run ([`read_ahead`](Relay::read_ahead)), in the order
    /// they were asked; poll after every input, as [`poll_output`](Relay::poll_output).
    pub fn poll_read(&mut self) -> Option<ReadRequest> {
        self.prefetch.poll_read()
    }

    /// What waits for reads ahead now.
    pub fn prefetch(&self) -> crate::stats::PrefetchStats {
        self.prefetch.stats()
    }
}
