//! The relay's side of reads ahead (`crate::prefetch`): a frame tried against the rows read
//! so far and parked on its first miss, the reads handed to the shell, a read's return running
//! the frames that waited for it, and the refusal of a frame that cannot wait.

use wire::frames::ErrorFrame;
use wire::{ErrorCode, ServerFrame, UnixMs};

use super::Relay;
use crate::prefetch::{ReadDone, ReadOp, ReadRequest, Reparked};
use crate::shell::ConnId;

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
        let stats = self.stats;
        self.reading_ahead = true;
        let missed = self.run_frame(now, conn, frame);
        self.reading_ahead = false;
        if missed.is_some() {
            // The attempt's refusal is dropped, and what it counted with it, but for the reads
            // it made from the rows read ahead (work done, which its next run will not redo).
            let tried = std::mem::replace(&mut self.stats, stats);
            self.stats.keep_reads(&tried);
            self.stats.frames_parked += 1;
        }
        missed
    }

    /// The read `done` came back: the frames parked on it run again, in the order they
    /// were parked, each followed by the frames of its connection queued behind it (until one
    /// needs another read). Drain `poll_output` afterwards, as after any input.
    pub fn handle_read(&mut self, now: UnixMs, done: ReadDone) {
        self.prefetch.complete(done);
        while let Some(conn) = self.prefetch.next_ready() {
            self.resume(now, conn);
        }
    }

    /// Runs `conn`'s waiting frames in order until one needs another read; a connection its
    /// client closed meanwhile is dropped once none waits.
    fn resume(&mut self, now: UnixMs, conn: ConnId) {
        self.run_waiting(now, conn);
        if self.prefetch.closed(conn) {
            self.cx().drop_conn(conn);
        }
    }

    fn run_waiting(&mut self, now: UnixMs, conn: ConnId) {
        while let Some(frame) = self.prefetch.head(conn) {
            if self.failed {
                self.prefetch.forget(conn);
                return;
            }
            if self.prefetch.head_uncharged(conn) {
                if !self.admit(now, conn) {
                    // Over its budget (closed), or the relay closed it meanwhile.
                    self.prefetch.forget(conn);
                    return;
                }
                self.prefetch.head_charged(conn);
            }
            let Some(op) = self.attempt(now, conn, frame) else {
                self.prefetch.ran(conn);
                continue;
            };
            match self.prefetch.parked_again(conn, op) {
                Reparked::Waiting => return,
                Reparked::TooManyRounds(frame, (code, words)) => {
                    self.refuse_waiting(conn, &frame, code, words);
                }
            }
        }
    }

    /// Refuses `frame` of `conn`, which cannot wait for its reads (a bound of
    /// `crate::prefetch`, which chose the code and counted the refusal's probe).
    pub(super) fn refuse_waiting(
        &mut self,
        conn: ConnId,
        frame: &wire::ClientFrame,
        code: ErrorCode,
        words: &str,
    ) {
        use wire::ClientFrame as F;
        self.stats.frames_refused_waiting += 1;
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
    /// requests, upgrades and timers still read on the caller's thread.
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
