//! What a rule works with while the relay handles one input: a borrowing view of the relay's
//! parts ([`Cx`]), built by the dispatcher ([`crate::relay`]) for each input and dropped when
//! the rule returns.
//!
//! Every rule of the service is a method of `Cx` in the module of its area (`messaging`,
//! `sync`, `orders` ...): it reads and writes the working state through [`State`]'s methods,
//! reads the store through its caches, and stages the input's outputs here, which the
//! dispatcher releases after the input's commit. What a rule cannot reach is the dispatcher's
//! own: the commit pipeline, the released outputs, the request budgets and the fail-stop flag.

use wire::frames::{ErrorFrame, GoawayFrame};
use wire::{ErrorCode, ServerFrame, UserUuid};

use crate::admission::Admission;
use crate::blob::BlobStore;
use crate::config::Config;
use crate::credential::CredentialKey;
use crate::ids::IdGen;
use crate::prefetch::Reader;
use crate::sessions::Sessions;
use crate::shell::{CloseReason, ConnId, Output};
use crate::state::ReadCx;
use crate::state::State;
use crate::stats::RelayStats;
use crate::throttles::Throttles;
use crate::token::TokenKeys;

/// The relay's parts one input's rules may use (see the module doc).
pub(crate) struct Cx<'a> {
    /// The relay's configuration (read only).
    pub(crate) config: &'a Config,
    /// Keyed reads of what the relay does not hold in memory (accounts, tombstones, queues):
    /// on the relay's task, or from the rows read ahead ([`Cx::read_parts`]).
    pub(crate) reader: Reader<'a>,
    /// Ids and random values (seeded).
    pub(crate) ids: &'a mut IdGen,
    /// Signs and verifies JWTs.
    pub(crate) tokens: &'a TokenKeys,
    /// Seals and opens auth challenges and tickets (`crate::credential`).
    pub(crate) credentials: &'a CredentialKey,
    /// The working state (`crate::state`).
    pub(crate) state: &'a mut State,
    /// Proof-of-work challenges and the sign-in limits (`crate::admission`).
    admission: &'a mut Admission,
    /// The open connections (`crate::sessions`).
    sessions: &'a mut Sessions,
    /// Frame-level limits (`crate::throttles`).
    throttles: &'a mut Throttles,
    /// Media part bytes (`crate::media`).
    blobs: &'a mut dyn BlobStore,
    /// What the relay did ([`crate::Relay::stats`]).
    pub(crate) stats: &'a mut RelayStats,
    /// Outputs of the input being handled; released after its commit.
    staged: &'a mut Vec<Output>,
    /// The caller of the HTTP request being handled, once the dispatcher verified its token.
    verified: Option<&'a (UserUuid, String)>,
    /// The number a forward of the HTTP request being handled gets, when a rule may forward
    /// it to another shard (its answer then comes later: `crate::shards`).
    pub(crate) request: Option<u64>,
    /// The input changed something outside its batch and staged outputs (a frame refunded,
    /// messages released from a window): a read that misses may no longer end its attempt.
    changed: bool,
    /// [`State::touched`] when the input began.
    touched: u64,
}

impl<'a> Cx<'a> {
    /// The view over the relay's parts; `staged` collects the input's outputs.
    #[allow(
        clippy::too_many_arguments,
        reason = "one borrow per part of the relay"
    )]
    pub(crate) fn new(
        config: &'a Config,
        reader: Reader<'a>,
        ids: &'a mut IdGen,
        keys: (&'a TokenKeys, &'a CredentialKey),
        state: &'a mut State,
        admission: &'a mut Admission,
        sessions: &'a mut Sessions,
        throttles: &'a mut Throttles,
        blobs: &'a mut dyn BlobStore,
        stats: &'a mut RelayStats,
        staged: &'a mut Vec<Output>,
        verified: Option<&'a (UserUuid, String)>,
        request: Option<u64>,
    ) -> Self {
        let touched = state.touched();
        Self {
            config,
            reader,
            ids,
            tokens: keys.0,
            credentials: keys.1,
            state,
            admission,
            sessions,
            throttles,
            blobs,
            stats,
            staged,
            verified,
            request,
            changed: false,
            touched,
        }
    }

    /// Notes a change outside the batch and the staged outputs ([`Cx::read_parts`]).
    pub(crate) fn changed(&mut self) {
        self.changed = true;
    }

    /// Proof-of-work challenges and the sign-in limits, to read.
    pub(crate) fn admission(&self) -> &Admission {
        self.admission
    }

    /// Proof-of-work challenges and the sign-in limits, to change: the input has changed
    /// something outside its batch ([`Cx::changed`]), so a read after it never ends an attempt.
    pub(crate) fn admission_mut(&mut self) -> &mut Admission {
        self.changed = true;
        self.admission
    }

    /// The open connections, to read.
    pub(crate) fn sessions(&self) -> &Sessions {
        self.sessions
    }

    /// The open connections, to change ([`Cx::changed`]).
    pub(crate) fn sessions_mut(&mut self) -> &mut Sessions {
        self.changed = true;
        self.sessions
    }

    /// The open connections, for a change that the same input run again makes exactly again
    /// (a mark moved to a maximum): it does not count as changed ([`Cx::changed`]).
    pub(crate) fn sessions_idempotent(&mut self) -> &mut Sessions {
        self.sessions
    }

    /// Frame-level limits, to read.
    pub(crate) fn throttles(&self) -> &Throttles {
        self.throttles
    }

    /// Frame-level limits, to change ([`Cx::changed`]).
    pub(crate) fn throttles_mut(&mut self) -> &mut Throttles {
        self.changed = true;
        self.throttles
    }

    /// Media part bytes; every use may change them ([`Cx::changed`]).
    pub(crate) fn blobs_mut(&mut self) -> &mut dyn BlobStore {
        self.changed = true;
        &mut *self.blobs
    }

    /// The state and a reader for a read through its caches. Reading ahead, a read that
    /// misses ends the frame's attempt only while the input has written and staged nothing
    /// (`crate::prefetch`); after that it is made on the relay's task.
    pub(crate) fn read_parts(&mut self) -> (&mut State, ReadCx<'_>) {
        let clean = !self.changed
            && self.staged.is_empty()
            && self.state.batch().is_empty()
            && self.state.touched() == self.touched;
        self.reader.may_park(clean);
        (&mut *self.state, ReadCx::new(&mut self.reader, self.stats))
    }

    /// A read of this frame's attempt missed the rows read ahead: the attempt will be
    /// dropped and the frame run again once the read is done, so its refusal changes nothing.
    pub(crate) fn read_missed(&self) -> bool {
        self.reader.missed()
    }

    /// The caller of the HTTP request being handled, if the dispatcher verified its token
    /// already (one verification per request).
    pub(crate) fn verified_caller(&self) -> Option<&'a (UserUuid, String)> {
        self.verified
    }

    /// Stages `frame` for `conn` (sent after the input's commit).
    pub(crate) fn send(&mut self, conn: ConnId, frame: ServerFrame) {
        self.staged.push(Output::Send { conn, frame });
    }

    /// Stages any output (released after the input's commit).
    pub(crate) fn stage(&mut self, out: Output) {
        self.staged.push(out);
    }

    /// Sends an error frame (the refusal probe `refuse:CODE@file` of the module that decided
    /// it, feature `probes`).
    #[cfg_attr(feature = "probes", track_caller)]
    pub(crate) fn send_error(
        &mut self,
        conn: ConnId,
        code: ErrorCode,
        message: &str,
        ref_type: Option<String>,
        id: Option<String>,
    ) {
        probes::refusal(code.as_str());
        self.send(
            conn,
            ServerFrame::Error(ErrorFrame {
                error: code,
                message: message.to_owned(),
                ref_type,
                id,
            }),
        );
    }

    /// Sends GOAWAY (reason at top level and in `payload`) and closes `conn`.
    pub(crate) fn goaway(&mut self, conn: ConnId, reason: &str) {
        self.send(
            conn,
            ServerFrame::Goaway(GoawayFrame {
                reason: reason.to_owned(),
            }),
        );
        self.staged.push(Output::Close {
            conn,
            reason: CloseReason::Goaway,
        });
        self.drop_conn(conn);
    }

    /// Closes `conn` because something its delivery needs could not be read (1013): the
    /// client reconnects and its `sync` replays what it missed.
    pub(crate) fn close_unreadable(&mut self, conn: ConnId) {
        if self.read_missed() {
            return;
        }
        self.staged.push(Output::Close {
            conn,
            reason: CloseReason::StorageUnavailable,
        });
        self.drop_conn(conn);
    }

    pub(crate) fn drop_conn(&mut self, conn: ConnId) {
        let Some(c) = self.sessions.close(conn) else {
            return;
        };
        self.state.submissions_closed(conn.0);
        if c.synced {
            self.state.release_queues(&c.user);
        }
    }

    /// The online connection of `user`, if any.
    pub(crate) fn online(&self, user: &UserUuid) -> Option<ConnId> {
        self.sessions.online(user)
    }

    /// A `delivered`/`read` of `conn` released messages pushed to it: the frame was free
    /// (a client may answer every pushed `msg` without spending its budget).
    pub(crate) fn refund_frame(&mut self, conn: ConnId) {
        self.changed();
        if let Some(user) = self.sessions.user(conn) {
            self.throttles.refund_frame(user);
        }
    }
}
