//! What the relay and its shell exchange: connection ids, the effects it emits
//! ([`Output`]), why it closes a socket, what a WebSocket upgrade carries and what it answers;
//! and the per-connection record the relay keeps.

use wire::{ServerFrame, UnixMs, UserUuid};

/// A WebSocket connection, numbered by the shell (unique for the life of a `Relay`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u64);

/// An HTTP request, numbered by the shell, that waits for a read ahead
/// ([`Relay::handle_request`](super::Relay::handle_request)); its response comes out as
/// [`Output::Http`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// Why the relay asks the shell to close a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// A GOAWAY was sent just before (another session took over, or the token was revoked).
    Goaway,
    /// No frame for `idle_timeout_ms`.
    Idle,
    /// The store failed: the relay stopped (fail-stop) and must be rebuilt from the store.
    StorageFailure,
    /// The connection used up its frame budget (`Config::frame_burst_per_conn`, refilled at
    /// `Config::frames_per_min_per_conn`): the relay stopped answering it. Shells close with
    /// 1008 (policy violation), reason `rate limit`.
    RateLimited,
    /// A read of the store failed where the connection cannot go on without it (its `sync`):
    /// the relay runs on; the client reconnects and tries again. Shells close with 1013 (try
    /// again later).
    StorageUnavailable,
}

/// An effect for the shell to execute, drained with [`Relay::poll_output`](super::Relay::poll_output).
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Send `frame` as one text message on `conn` (`frame.encode()`).
    Send {
        /// Target connection.
        conn: ConnId,
        /// The frame.
        frame: ServerFrame,
    },
    /// Close `conn` (after sending everything queued before this output).
    Close {
        /// Target connection.
        conn: ConnId,
        /// Why.
        reason: CloseReason,
    },
    /// Deliver a push notification to one of `user`'s push targets (Web Push: encrypt
    /// `payload`'s JSON for the subscription keys and sign with VAPID; FCM / APNs: a data
    /// message). Best effort: the relay expects no answer; the message itself stays queued
    /// for the next `sync`. Emitted after the commit of the message that caused it.
    Push {
        /// The recipient account.
        user: UserUuid,
        /// Where to deliver (its `Debug` redacts endpoints, keys and tokens).
        target: crate::push_targets::PushTarget,
        /// Always `{"type":"new_msg"}`.
        payload: wire::http::PushPayload,
    },
    /// The response to request `id`, which waited for a read ahead
    /// ([`Relay::handle_request`](super::Relay::handle_request) returned `None`); released
    /// after the commit of what it wrote, as any response.
    Http {
        /// The shell's number for the request.
        id: RequestId,
        /// The response.
        response: crate::http::HttpResponse,
    },
    /// The answer to the WebSocket upgrade of `conn`, which waited for a read ahead
    /// ([`Relay::handle_connect_ahead`](super::Relay::handle_connect_ahead) returned `None`):
    /// accepted (the shell completes the upgrade) or the response to send instead.
    Connect {
        /// The connection the shell numbered for the upgrade.
        conn: ConnId,
        /// What [`Relay::handle_connect`](super::Relay::handle_connect) would have returned.
        result: Result<Accepted, crate::http::HttpResponse>,
    },
    /// Something for the core of another shard (`crate::handoff`): the shell carries it to
    /// [`Relay::handle_crossing`](super::Relay::handle_crossing) of the core that runs shard
    /// [`Crossing::to`](crate::handoff::Crossing::to), on a transport that may lose, repeat or
    /// reorder it. Released after the commit of what it follows from (a hand-off after its
    /// outbox row, an acknowledgement after the apply, a verdict after the message). A
    /// hand-off is emitted again every [`RESEND_MS`](crate::handoff::RESEND_MS) until it is
    /// acknowledged. A relay of one shard never emits it.
    Cross(crate::handoff::Crossing),
}

impl Output {
    /// The connection it is for, if any (a frame, a close, an upgrade's answer).
    pub(crate) fn conn(&self) -> Option<ConnId> {
        match self {
            Self::Send { conn, .. } | Self::Close { conn, .. } | Self::Connect { conn, .. } => {
                Some(*conn)
            }
            Self::Push { .. } | Self::Http { .. } | Self::Cross(_) => None,
        }
    }
}

/// A connection accepted by [`Relay::handle_connect`](super::Relay::handle_connect).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// The account.
    pub user: UserUuid,
    /// The `Sec-WebSocket-Protocol` value the shell must echo (`"bearer"` when the iOS
    /// `bearer,<jwt>` form authenticated the socket), else `None`.
    pub subprotocol: Option<&'static str>,
}

/// The WebSocket upgrade request: the raw query and the `Sec-WebSocket-Protocol` header.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct WsConnect {
    /// Raw query string without `?` (`user_uuid=…&ticket=…`).
    pub query: String,
    /// The `Sec-WebSocket-Protocol` request header, if any.
    pub protocol: Option<String>,
}

impl std::fmt::Debug for WsConnect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WsConnect { .. }")
    }
}

#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) user: UserUuid,
    pub(crate) jti: String,
    pub(crate) last_seen: UnixMs,
    pub(crate) synced: bool,
    /// What is in flight on this connection and whose turn is next (`crate::window`, its rules
    /// in `crate::sync`).
    pub(crate) window: crate::window::Window,
}

impl Conn {
    /// A connection of `user` authenticated by the token `jti` at `now`, not synced yet.
    pub(crate) fn new(user: UserUuid, jti: String, now: UnixMs) -> Self {
        Self {
            user,
            jti,
            last_seen: now,
            synced: false,
            window: crate::window::Window::default(),
        }
    }
}
