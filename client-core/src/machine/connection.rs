//! Connection: ticket, WebSocket, heartbeat, reconnect with backoff, GOAWAY, and the one
//! re-authentication after a refused token.
//!
//! * A connection starts with a ticket request (A5); when it fails the JWT goes in the query
//!   instead. A 401 on the ticket request skips that fallback (it would be refused too).
//! * While open, a `ping` every [`HEARTBEAT_INTERVAL_MS`]. On open: `sync`, the outbox
//!   re-sends, then the queued actions.
//! * A failed or closed socket is retried after `min(1 s · 2^n, 30 s) × jitter`, jitter
//!   uniform in `[0.7, 1.0)` from the seeded RNG (`n` = retries fired since the last open).
//!   Never after GOAWAY or `disconnect`.
//! * A refused token (401 on the ticket request or the upgrade) is dropped and the machine
//!   re-authenticates **once** per episode (an open socket or an app `connect` restores the
//!   budget), then reconnects. Terminal, with `AuthFailed` and no further attempt until the
//!   app connects again: the relay refuses the re-authentication or the fresh token. A
//!   re-authentication the relay could not answer (transport error, 408, 429, 5xx) is retried
//!   on the backoff.
//! * **GOAWAY wins** (PROTOCOL S-12): after one the machine neither reconnects nor
//!   re-authenticates on its own, and late ticket or upgrade answers are ignored; an app
//!   `connect` takes the session back.

use rand_core::Rng as _;
use serde_json::{Value, json};
use wire::frames::{CRYPTO_V_MESSAGE, ClientFrame, GoawayFrame, PingFrame, SyncFrame};

use super::auth::AuthFailure;
use super::client::{Client, Method, Pending, ok_status};
use super::event::{ClientError, Event};
use crate::store::ClientStore;

/// Heartbeat interval (web client value).
pub const HEARTBEAT_INTERVAL_MS: u64 = 25_000;
/// First reconnect delay before jitter.
pub const RECONNECT_BASE_MS: u64 = 1_000;
/// Largest reconnect delay before jitter.
pub const RECONNECT_MAX_MS: u64 = 30_000;
/// Jitter range lower bound, per mille of the delay (0.7).
pub const RECONNECT_JITTER_MIN_PERMILLE: u64 = 700;
/// Jitter range width, per mille (upper bound 1.0 exclusive).
pub const RECONNECT_JITTER_SPAN_PERMILLE: u64 = 300;

impl<S: ClientStore> Client<S> {
    /// Connects (now, or as soon as authenticated).
    pub fn connect(&mut self, now_ms: u64) {
        self.link.want_connected = true;
        if matches!(self.link.state, Conn::Idle | Conn::Goaway) {
            self.link.state = Conn::Idle;
            self.link.retries = 0;
            self.link.reauth_spent = false;
            if self.token.is_some() {
                self.start_connect(now_ms);
            } else if self.stored.is_some() {
                // The token was dropped (refused, or a re-authentication the relay could not
                // answer was pending when the app went offline): get a new one with the
                // stored identity; `on_verify` connects.
                self.link.reauth_spent = true;
                self.reauthenticate(now_ms);
            }
        }
    }

    /// Closes the socket and stops reconnecting.
    pub fn disconnect(&mut self, _now_ms: u64) {
        self.link.want_connected = false;
        if matches!(
            self.link.state,
            Conn::Open | Conn::Connecting | Conn::FetchingTicket
        ) {
            self.out.command(ConnCommand::Close);
        }
        self.link.state = Conn::Idle;
        self.link.next_ping_ms = None;
        self.set_network(NetworkState::Disconnected);
    }

    fn start_connect(&mut self, _now_ms: u64) {
        self.link.state = Conn::FetchingTicket;
        self.set_network(NetworkState::Connecting);
        self.out.request(
            Method::Post,
            wire::http::paths::WS_TICKET.into(),
            Some(json!({})),
            true,
            Pending::Ticket,
        );
    }

    pub(super) fn on_ticket(&mut self, now_ms: u64, status: u16, v: Option<&Value>) {
        if self.link.state != Conn::FetchingTicket {
            return;
        }
        if status == 401 {
            // The bearer token itself was refused: the token fallback would be refused too.
            return self.token_refused(now_ms, status);
        }
        let (Some(uuid), Some(token)) = (
            self.stored.as_ref().map(|s| s.uuid.clone()),
            self.token.as_ref().map(|t| t.expose().to_owned()),
        ) else {
            self.link.state = Conn::Idle;
            return;
        };
        let ticket = v
            .filter(|_| ok_status(status))
            .and_then(|v| v.get("ticket")?.as_str().map(str::to_owned));
        let auth = match ticket {
            Some(t) => WsAuth::Ticket(t),
            None => WsAuth::Token(token),
        };
        self.link.state = Conn::Connecting;
        self.out.command(ConnCommand::Connect {
            user_uuid: uuid,
            auth,
        });
    }

    /// The relay refused our token (401 on the ticket request or the upgrade), without a
    /// GOAWAY on this connection (after one `link.state` is [`Conn::Goaway`] and nothing gets
    /// here): re-authenticate once with the stored identity, then reconnect; a second refusal
    /// before a socket opened is terminal (see the module doc).
    fn token_refused(&mut self, now_ms: u64, status: u16) {
        self.token = None;
        self.link.state = Conn::Idle;
        if self.link.reauth_spent || self.stored.is_none() {
            self.stop_reconnecting();
            self.out
                .event(Event::AuthFailed(AuthFailure::TokenRefused(status)));
            return;
        }
        self.link.reauth_spent = true;
        self.reauthenticate(now_ms);
    }

    /// A call made with the token was refused `401` while the socket may still be open (the
    /// token expired under a long-lived socket, or was revoked): the token is dropped and the
    /// machine re-authenticates once with the stored identity, keeping the socket. Not after a
    /// GOAWAY (the other device keeps the session), not while an auth flow runs, and once per
    /// episode: the budget comes back with an open socket or a call the token passed.
    pub(super) fn rest_token_refused(&mut self) {
        if self.link.state == Conn::Goaway || self.link.reauth_spent || self.flow.is_some() {
            return;
        }
        let Some(stored) = self.stored.clone() else {
            return;
        };
        self.link.reauth_spent = true;
        self.token = None;
        // A stored identity that no longer derives its keys cannot re-authenticate: the next
        // connection attempt reports it.
        let _ = self.start_auth_round(&stored, true);
    }

    /// A call made with the token passed: a later refusal is a new episode.
    pub(super) fn token_passed(&mut self) {
        if self.link.state == Conn::Open {
            self.link.reauth_spent = false;
        }
    }

    /// Runs challenge/verify for the stored identity (unless an auth flow already runs: its
    /// token serves as well); `on_verify` reconnects.
    fn reauthenticate(&mut self, now_ms: u64) {
        self.link.state = Conn::Idle;
        self.set_network(NetworkState::Connecting);
        if self.flow.is_some() {
            return;
        }
        let started = match self.stored.clone() {
            Some(stored) => self.start_auth_round(&stored, true).is_ok(),
            None => false,
        };
        if !started {
            self.auth_failed(now_ms, true, AuthFailure::BadResponse);
        }
    }

    /// The WebSocket upgrade was answered with an HTTP `status` instead of `101` (the shell
    /// reports a transport failure with [`Client::handle_disconnected`]). A 401 means the
    /// ticket or token was refused and starts the re-authentication of the
    /// [machine doc](crate::machine); any other status is an ordinary failed attempt (backoff
    /// and retry).
    pub fn handle_connect_refused(&mut self, now_ms: u64, status: u16) {
        if status == 401 && self.link.state == Conn::Connecting && self.link.want_connected {
            self.token_refused(now_ms, status);
        } else {
            self.handle_disconnected(now_ms);
        }
    }

    /// The socket opened: `sync`, then every unacknowledged outbox intent with its id.
    pub fn handle_connected(&mut self, now_ms: u64) -> Result<(), ClientError> {
        if self.link.state != Conn::Connecting {
            return Ok(());
        }
        self.link.state = Conn::Open;
        self.link.retries = 0;
        self.link.reauth_spent = false;
        self.link.next_ping_ms = Some(now_ms + HEARTBEAT_INTERVAL_MS);
        self.set_network(NetworkState::Connected);
        self.out.frame(ClientFrame::Sync(SyncFrame {
            crypto_v: Some(CRYPTO_V_MESSAGE),
        }));
        self.resend_outbox()?;
        self.send_queued_actions()
    }

    /// The socket closed (or failed to open).
    pub fn handle_disconnected(&mut self, now_ms: u64) {
        self.link.next_ping_ms = None;
        self.actions.socket_closed();
        if self.link.state == Conn::Goaway || !self.link.want_connected {
            if self.link.state != Conn::Goaway {
                self.link.state = Conn::Idle;
            }
            self.set_network(NetworkState::Disconnected);
            return;
        }
        let delay = self.backoff_ms();
        self.link.state = Conn::WaitingRetry {
            at_ms: now_ms + delay,
        };
        self.set_network(NetworkState::Disconnected);
    }

    /// `min(1 s · 2^retries, 30 s)` scaled by a jitter in `[0.7, 1.0)`.
    fn backoff_ms(&mut self) -> u64 {
        let exp = RECONNECT_BASE_MS
            .checked_shl(self.link.retries.min(16))
            .unwrap_or(RECONNECT_MAX_MS)
            .min(RECONNECT_MAX_MS);
        let jitter =
            RECONNECT_JITTER_MIN_PERMILLE + self.rng.next_u64() % RECONNECT_JITTER_SPAN_PERMILLE;
        exp * jitter / 1000
    }

    pub(super) fn set_network(&mut self, state: NetworkState) {
        if self.link.network != state {
            self.link.network = state;
            self.out.event(Event::NetworkState(state));
        }
    }

    /// Terminal: no token that works, so no more attempts until the app authenticates and
    /// calls [`Client::connect`] again.
    pub(super) fn stop_reconnecting(&mut self) {
        self.link.want_connected = false;
        self.link.state = Conn::Idle;
        self.link.next_ping_ms = None;
        self.set_network(NetworkState::Disconnected);
    }
    /// Authenticated: connects if the app asked for it and nothing runs yet.
    pub(super) fn connect_if_wanted(&mut self, now_ms: u64) {
        if self.link.want_connected && matches!(self.link.state, Conn::Idle) {
            self.start_connect(now_ms);
        }
    }

    /// A re-authentication the machine started itself failed with `f`. True when it is
    /// retried on the backoff (the relay could not answer: transport error `0`, 408, 429,
    /// 5xx, and the app still wants to be connected); otherwise reconnecting stops (when the
    /// app still wanted it) and the caller reports the failure.
    pub(super) fn reauth_failed(&mut self, now_ms: u64, f: &AuthFailure) -> bool {
        if !self.link.want_connected {
            return false;
        }
        let transient = match f {
            AuthFailure::Auth(status) => {
                matches!(status, 0 | 408 | 429) || (500..600).contains(status)
            }
            _ => false,
        };
        if transient && matches!(self.link.state, Conn::Idle) {
            let delay = self.backoff_ms();
            self.link.state = Conn::WaitingRetry {
                at_ms: now_ms + delay,
            };
            self.set_network(NetworkState::Disconnected);
            return true;
        }
        self.stop_reconnecting();
        false
    }

    /// The reconnect and heartbeat timers.
    pub(super) fn connection_timers(&mut self, now_ms: u64) {
        if let Conn::WaitingRetry { at_ms } = self.link.state
            && now_ms >= at_ms
        {
            self.link.retries += 1;
            if self.token.is_some() {
                self.start_connect(now_ms);
            } else {
                // A re-authentication the relay could not answer: try it again.
                self.reauthenticate(now_ms);
            }
        }
        if self.link.state == Conn::Open
            && let Some(at) = self.link.next_ping_ms
            && now_ms >= at
        {
            self.out
                .frame(ClientFrame::Ping(PingFrame { crypto_v: None }));
            self.link.next_ping_ms = Some(now_ms + HEARTBEAT_INTERVAL_MS);
        }
    }

    /// GOAWAY: the relay ended the session; close and never come back on our own.
    pub(super) fn on_goaway(&mut self, g: GoawayFrame) {
        self.link.state = Conn::Goaway;
        self.link.next_ping_ms = None;
        self.out.command(ConnCommand::Close);
        self.set_network(NetworkState::Disconnected);
        self.out.event(Event::Goaway(g.reason));
    }
}

/// How the WebSocket authenticates.
#[derive(Clone, PartialEq, Eq)]
pub enum WsAuth {
    /// `?user_uuid=…&ticket=…`
    Ticket(String),
    /// `?user_uuid=…&token=…` (fallback).
    Token(String),
}

impl std::fmt::Debug for WsAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Ticket(_) => f.write_str("Ticket(<redacted>)"),
            Self::Token(_) => f.write_str("Token(<redacted>)"),
        }
    }
}

/// Socket commands for the shell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnCommand {
    /// Open `/ws` with these query values.
    Connect {
        /// The account uuid (`user_uuid`).
        user_uuid: String,
        /// Ticket or token.
        auth: WsAuth,
    },
    /// Close the socket.
    Close,
}

/// Network state reported to the app.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkState {
    /// Socket open.
    Connected,
    /// Opening or waiting to retry.
    Connecting,
    /// Closed and not retrying.
    Disconnected,
}

/// Where the connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Conn {
    Idle,
    FetchingTicket,
    Connecting,
    Open,
    WaitingRetry { at_ms: u64 },
    Goaway,
}

/// The connection's state.
#[derive(Debug)]
pub(super) struct Link {
    pub(super) state: Conn,
    /// The app asked to be connected (`connect`, until `disconnect` or a terminal failure).
    pub(super) want_connected: bool,
    /// Reconnects fired since the last open (the backoff exponent).
    pub(super) retries: u32,
    /// The machine re-authenticated after a refused token since the last open (or `connect`).
    pub(super) reauth_spent: bool,
    /// Next heartbeat, while open.
    pub(super) next_ping_ms: Option<u64>,
    /// Last state reported to the app.
    pub(super) network: NetworkState,
}

impl Default for Link {
    fn default() -> Self {
        Self {
            state: Conn::Idle,
            want_connected: false,
            retries: 0,
            reauth_spent: false,
            next_ping_ms: None,
            network: NetworkState::Disconnected,
        }
    }
}
