//! What the handlers (`rest`, `ws`) and the server's loop exchange with the core task: its
//! inputs, the answer to a WebSocket connect, a socket's outbound queue items, and the
//! server's phase (the way to the current core, if any); what wakes the core task, and what a
//! core is given for its term.

use super::*;
use relay_core::handoff::{ShardId, ShardMap};

/// A message to the core task.
pub(crate) enum Input {
    /// A REST request; the response goes back on `reply`.
    Http {
        req: relay_core::HttpRequest,
        reply: oneshot::Sender<HttpResponse>,
    },
    /// A WebSocket upgrade to authenticate; `Err` is the response to send instead.
    Connect {
        ws: WsConnect,
        reply: oneshot::Sender<Result<Connected, HttpResponse>>,
    },
    /// A frame a socket task decoded (text, or binary holding UTF-8 JSON), or why it could
    /// not; the relay charges either to the connection's frame budget.
    Frame {
        conn: ConnId,
        decoded: Result<ClientFrame, FrameError>,
    },
    /// The socket ended (closed, failed, or its task was dropped); `slow`: the socket task
    /// ended it because the client did not read in time (a write or a ping past its deadline).
    Disconnect { conn: ConnId, slow: bool },
    /// Test mode only: move the clock forward by `ms`, fire due timers, answer the new now.
    AdvanceClock {
        ms: u64,
        reply: oneshot::Sender<UnixMs>,
    },
    /// What another shard's core sent this one ([`Relay::handle_crossing`]).
    Cross(relay_core::handoff::Crossing),
    /// The push worker reported a target of this shard's user gone (a sharded server routes
    /// the worker's reports to their users' cores).
    Gone(GoneTarget),
}

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print bodies, frames, tokens or tickets.
        match self {
            Self::Http { req, .. } => write!(f, "Http({req:?})"),
            Self::Connect { .. } => f.write_str("Connect"),
            Self::Frame { conn, decoded } => match decoded {
                Ok(frame) => write!(f, "Frame({}, {})", conn.0, frame.frame_type()),
                Err(e) => write!(f, "Frame({}, undecodable: {})", conn.0, e.code()),
            },
            Self::Disconnect { conn, slow } => write!(f, "Disconnect({}, slow: {slow})", conn.0),
            Self::AdvanceClock { ms, .. } => write!(f, "AdvanceClock({ms} ms)"),
            Self::Cross(c) => write!(f, "Cross(to shard {})", c.to().0),
            Self::Gone(g) => write!(f, "Gone({})", g.target.kind()),
        }
    }
}

/// An accepted upgrade: what the socket task needs.
#[derive(Debug)]
pub(crate) struct Connected {
    pub(crate) conn: ConnId,
    pub(crate) user: UserUuid,
    pub(crate) subprotocol: Option<&'static str>,
    pub(crate) outbound: mpsc::Receiver<Outbound>,
}

/// What the core asks a socket task to do, in order.
pub(crate) enum Outbound {
    /// Write one text message (shared: a frame sent to many sockets is encoded once); its
    /// [`Charge`] gives its bytes back once written or dropped.
    Text(Utf8Bytes, Charge),
    /// Write a close frame (after everything before it) and end.
    Close { code: u16, reason: &'static str },
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the text: it may carry a payload.
        match self {
            Self::Text(text, _) => write!(f, "Text({} bytes)", text.len()),
            Self::Close { code, reason } => write!(f, "Close({code}, {reason})"),
        }
    }
}

/// What the server is doing, as the handlers see it.
#[derive(Clone, Debug)]
pub(crate) enum Phase {
    /// Not leading (a campaigning server before it leads, or between terms): every route but
    /// the probes answers 503 `NOT_LEADER`.
    Standby,
    /// Serving: the way to the current core tasks.
    Active {
        inputs: Cores,
        /// The term's fencing token (campaigning servers).
        epoch: Option<u64>,
        /// The relay failed and could not yet be rebuilt from its store.
        store_down: Arc<AtomicBool>,
    },
    /// Shut down: the core task is gone or going.
    Stopping,
}

/// The inputs of a server's cores, one per shard (one for an unsharded relay; a cluster node
/// has only the shards it owns), and how a handler picks the core of a request or an upgrade.
#[derive(Clone, Debug)]
pub(crate) struct Cores {
    map: ShardMap,
    inputs: Arc<[Option<mpsc::Sender<Input>>]>,
    /// The runtime of each core's thread, in shard order, when the cores run on threads of
    /// their own (their sockets are served there); empty otherwise.
    homes: Arc<[tokio::runtime::Handle]>,
}

impl Cores {
    /// The cores of the shards of `map`, in shard order.
    pub(crate) fn new(map: ShardMap, inputs: Vec<mpsc::Sender<Input>>) -> Self {
        Self::partial(map, inputs.into_iter().map(Some).collect())
    }

    /// The cores of some shards of `map` (`None`: not served here), in shard order.
    pub(crate) fn partial(map: ShardMap, inputs: Vec<Option<mpsc::Sender<Input>>>) -> Self {
        debug_assert_eq!(inputs.len(), usize::from(map.shards()));
        Self {
            map,
            inputs: inputs.into(),
            homes: Arc::new([]),
        }
    }

    /// The same cores, each on its thread whose runtime is `homes[shard]`.
    pub(crate) fn with_homes(self, homes: Vec<tokio::runtime::Handle>) -> Self {
        debug_assert_eq!(homes.len(), self.inputs.len());
        Self {
            homes: homes.into(),
            ..self
        }
    }

    /// The one core of an unsharded relay.
    pub(crate) fn one(inputs: mpsc::Sender<Input>) -> Self {
        Self::new(
            relay_core::handoff::ShardPlace::single().map(),
            vec![inputs],
        )
    }

    /// The core to hand `req` to ([`relay_core::shard_for_request`]: any core decides it
    /// right; this one seldom forwards it); `Err` with its shard when that shard is not
    /// served here.
    pub(crate) fn for_request(
        &self,
        req: &relay_core::HttpRequest,
    ) -> Result<mpsc::Sender<Input>, ShardId> {
        let shard = relay_core::shard_for_request(self.map, req);
        self.at(shard).ok_or(shard)
    }

    /// The core of the account an upgrade's query names (the first shard's when it names
    /// none: any core refuses it); `Err` with its shard when that shard is not served here.
    pub(crate) fn for_upgrade(&self, query: &str) -> Result<UpgradeCore, ShardId> {
        let shard = relay_core::shard_for_upgrade(self.map, query).unwrap_or(ShardId(0));
        let home = self
            .homes
            .get(usize::from(shard.0) % self.inputs.len().max(1))
            .cloned();
        Ok(UpgradeCore {
            shard,
            inputs: self.at(shard).ok_or(shard)?,
            home,
        })
    }

    /// The core of `shard`, if it is served here.
    pub(crate) fn for_shard(&self, shard: ShardId) -> Option<mpsc::Sender<Input>> {
        self.at(shard)
    }

    /// The shards served here, in order.
    pub(crate) fn served(&self) -> Vec<u16> {
        (0..self.map.shards())
            .filter(|&shard| {
                self.inputs
                    .get(usize::from(shard))
                    .is_some_and(Option::is_some)
            })
            .collect()
    }

    /// Every core served here, in shard order.
    pub(crate) fn all(&self) -> impl Iterator<Item = &mpsc::Sender<Input>> {
        self.inputs.iter().flatten()
    }

    /// Every shard's core, held weakly, by shard (what the cores of a sharded server send
    /// each other crossings through).
    pub(crate) fn weak(&self) -> PeerTable {
        self.inputs
            .iter()
            .map(|inputs| inputs.as_ref().map(mpsc::Sender::downgrade))
            .collect()
    }

    fn at(&self, shard: ShardId) -> Option<mpsc::Sender<Input>> {
        self.inputs[usize::from(shard.0) % self.inputs.len()].clone()
    }
}

/// The inputs of every shard's core by shard, held weakly (`None`: not served here).
pub(crate) type PeerTable = Arc<[Option<mpsc::WeakSender<Input>>]>;

/// The core that serves an upgraded connection ([`Cores::for_upgrade`]).
pub(crate) struct UpgradeCore {
    /// Its shard (for the socket's logs).
    pub(crate) shard: ShardId,
    /// Its inputs.
    pub(crate) inputs: mpsc::Sender<Input>,
    /// The runtime of its thread, if it has one: the socket is served there.
    pub(crate) home: Option<tokio::runtime::Handle>,
}

impl Phase {
    /// Turns an active `phase` standby (a term ended); any other phase stays.
    pub(crate) fn stand_by(phase: &watch::Sender<Self>) {
        phase.send_if_modified(|phase| {
            if matches!(phase, Self::Active { .. }) {
                *phase = Self::Standby;
                true
            } else {
                false
            }
        });
    }
}

/// What woke the core task: one event, handled after the wait so that the work can be timed
/// apart from it.
pub(super) enum Wakeup {
    /// The term ended, with why.
    Ended(String),
    /// Shutdown began.
    Stop,
    /// A batch's commit completed.
    Committed(Completion),
    /// The relay's next deadline (or a rebuild) is due.
    Due,
    /// The push worker reported a target gone.
    Gone(GoneTarget),
    /// An input arrived (more that wait are taken with it).
    Input(Input),
    /// A read ahead of a parked frame came back.
    Read(relay_core::prefetch::ReadDone),
}

/// What outlives one core (a term): the push worker and its gone reports.
pub(crate) struct CoreParts {
    pub(crate) push: Option<PushSink>,
    pub(crate) gone: Option<mpsc::Receiver<GoneTarget>>,
}

/// The term a core serves, for a campaigning server (the whole relay) or a cluster node (one
/// shard).
pub(crate) struct TermCtx {
    /// Ends the core when it ends.
    pub(crate) end: TermEnd,
    /// Set to [`Phase::Standby`] the moment the term ends (a campaigning server's; a cluster
    /// node's other shards serve on).
    pub(crate) phase: Option<Arc<watch::Sender<Phase>>>,
}
