//! The one task that owns the sans-IO machine: commands in, outputs executed, events out.
//!
//! ```text
//! loop {
//!     select! { biased;                   // deterministic: earlier arms win ties
//!         command from the app handle   → machine input (reply through a oneshot)
//!         HTTP response / socket event  → machine input (tagged; stale sockets ignored)
//!         timer (poll_timeout, liveness) → handle_timeout
//!     }
//!     drain: poll_http → spawn request; poll_connection → open/close socket;
//!            poll_transmit → writer task; poll_event → waiters, listeners, broadcast
//! }
//! ```
//!
//! Liveness: the relay does not answer the text `ping`, and a TCP link that lost segments on a
//! partition stays stalled (no retransmission in turmoil, long timeouts on real networks). The
//! shell therefore sends a WebSocket `Ping` control frame with every heartbeat and closes the
//! socket when nothing (pong or frame) arrived for [`DEAD_LINK_MS`]; the machine then backs off
//! and reconnects as for any other drop.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use client_core::machine::{self, ConnCommand, Event, Method, WsAuth};
use client_core::store::ClientStore;
use futures_util::{SinkExt as _, StreamExt as _};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use wire::frames::ClientFrame;

use super::{
    AuthReply, ClientError, Clock, Command, EventHub, FriendsReply, RestCall, RestReply, WireTap,
};
use seam::net::{
    Connector, HttpClient, HttpRequest, Network, WsError, WsMessage, WsRequest, WsStream,
};

/// Silence on an open socket after which it is declared dead (two heartbeats plus slack).
pub const DEAD_LINK_MS: u64 = 2 * machine::HEARTBEAT_INTERVAL_MS + 10_000;
/// Bound of the queue of frames waiting for the socket writer.
const MAX_QUEUED_FRAMES: usize = 1024;
/// Bound of the internal queue of IO completions.
const MAX_QUEUED_IO: usize = 1024;

/// IO completions fed back into the driver.
enum Io<S> {
    Http {
        id: machine::RequestId,
        friends: bool,
        result: Option<(u16, Bytes)>,
    },
    Opened {
        generation: u64,
        result: Box<Result<WsStream<S>, WsError>>,
    },
    Text {
        generation: u64,
        text: String,
    },
    Alive {
        generation: u64,
    },
    Closed {
        generation: u64,
    },
}

/// The open socket: a writer task fed by a queue, a reader task feeding [`Io`].
struct Socket {
    generation: u64,
    writer: mpsc::Sender<WsMessage>,
    reader: JoinHandle<()>,
    last_inbound_ms: u64,
}

impl Drop for Socket {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Everything the driver task owns.
pub(super) struct Driver<N: Network, S: ClientStore> {
    pub(super) machine: machine::Client<S>,
    pub(super) http: HttpClient<N::Connector>,
    pub(super) clock: Clock,
    pub(super) hub: EventHub,
    pub(super) commands: mpsc::Receiver<Command<S>>,
    io_tx: mpsc::Sender<Io<<N::Connector as Connector>::Stream>>,
    io_rx: mpsc::Receiver<Io<<N::Connector as Connector>::Stream>>,
    generation: u64,
    connecting: Option<JoinHandle<()>>,
    socket: Option<Socket>,
    auth_waiters: Vec<AuthReply>,
    friends_waiters: Vec<FriendsReply>,
    connected_waiters: Vec<oneshot::Sender<()>>,
    tap: Option<Arc<dyn WireTap>>,
}

impl<N: Network, S: ClientStore + Send + 'static> Driver<N, S> {
    pub(super) fn new(
        machine: machine::Client<S>,
        http: HttpClient<N::Connector>,
        clock: Clock,
        hub: EventHub,
        commands: mpsc::Receiver<Command<S>>,
    ) -> Self {
        let (io_tx, io_rx) = mpsc::channel(MAX_QUEUED_IO);
        Self {
            machine,
            http,
            clock,
            hub,
            commands,
            io_tx,
            io_rx,
            generation: 0,
            connecting: None,
            socket: None,
            auth_waiters: Vec::new(),
            friends_waiters: Vec::new(),
            connected_waiters: Vec::new(),
            tap: None,
        }
    }

    /// The same, reporting the wire to `tap`.
    pub(super) fn with_tap(mut self, tap: Option<Arc<dyn WireTap>>) -> Self {
        self.tap = tap;
        self
    }

    fn now(&self) -> u64 {
        self.clock.now().0
    }

    /// Runs until every client handle is dropped or `shutdown` is commanded.
    pub(super) async fn run(mut self) {
        loop {
            let deadline = self.deadline_ms();
            let sleep_ms = deadline.map(|d| d.saturating_sub(self.now()));
            let timer = async {
                match sleep_ms {
                    Some(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                command = self.commands.recv() => {
                    let Some(command) = command else { break };
                    if !self.command(command) {
                        break;
                    }
                }
                Some(io) = self.io_rx.recv() => self.io(io),
                () = timer => self.timeout(),
            }
            self.drain();
        }
        self.close_socket();
    }

    fn deadline_ms(&self) -> Option<u64> {
        let dead = self
            .socket
            .as_ref()
            .map(|s| s.last_inbound_ms + DEAD_LINK_MS);
        [self.machine.poll_timeout(), dead]
            .into_iter()
            .flatten()
            .min()
    }

    fn timeout(&mut self) {
        let now = self.now();
        if let Some(socket) = &self.socket
            && now >= socket.last_inbound_ms + DEAD_LINK_MS
        {
            tracing::debug!(
                generation = socket.generation,
                "socket silent: declared dead"
            );
            self.close_socket();
            self.machine.handle_disconnected(now);
        }
        self.machine.handle_timeout(now);
    }

    /// One app command; `false` stops the driver.
    fn command(&mut self, command: Command<S>) -> bool {
        let now = self.now();
        match command {
            Command::Register {
                mnemonic,
                nickname,
                reply,
            } => match self.machine.register_account(now, &mnemonic, &nickname) {
                Ok(()) => self.auth_waiters.push(reply),
                Err(e) => drop(reply.send(Err(e.into()))),
            },
            Command::Restore { reply } => match self.machine.restore_session(now) {
                Ok(Some(_)) => self.auth_waiters.push(reply),
                Ok(None) => drop(reply.send(Ok(None))),
                Err(e) => drop(reply.send(Err(e.into()))),
            },
            Command::Connect => self.machine.connect(now),
            Command::Disconnect => self.machine.disconnect(now),
            Command::WaitConnected { reply } => {
                if self.machine.is_connected() {
                    let _ = reply.send(());
                } else {
                    self.connected_waiters.push(reply);
                }
            }
            Command::SyncFriends { reply } => {
                self.machine.sync_contacts(now);
                self.friends_waiters.push(reply);
            }
            Command::SetBase { endpoint } => {
                self.http.set_endpoint(endpoint);
                self.http.clear_idle();
            }
            Command::Rest { call, reply } => self.rest(call, reply),
            Command::Machine { op } => op(&mut self.machine, now),
            Command::Shutdown => return false,
        }
        true
    }

    /// A thin REST call: the bearer token and endpoint of the moment, performed off-task.
    fn rest(&mut self, call: RestCall, reply: oneshot::Sender<RestReply>) {
        let mut request = HttpRequest::new(call.method, call.path);
        // As every reference client: the token goes on every request once there is one,
        // public routes included; a route that needs it is not sent without one.
        match self.machine.bearer_token() {
            Some(token) => request = request.bearer(token),
            None if call.bearer => {
                drop(reply.send(Err(ClientError::NotAuthenticated)));
                return;
            }
            None => {}
        }
        if let Some((content_type, body)) = call.body {
            request = request
                .header(http::header::CONTENT_TYPE, content_type)
                .body(body);
        }
        let http = self.http.clone();
        let tap = self.tap.clone();
        tokio::spawn(async move {
            let (method, path) = (
                request.method().clone(),
                request.path_and_query().to_owned(),
            );
            let result = http
                .send(request)
                .await
                .map_err(|e| ClientError::Transport(e.to_string()));
            if let Some(tap) = &tap {
                match &result {
                    Ok(r) => tap.http(&method, &path, r.status.as_u16(), &r.body),
                    Err(_) => tap.http(&method, &path, 0, &[]),
                }
            }
            drop(reply.send(result));
        });
    }

    fn io(&mut self, io: Io<<N::Connector as Connector>::Stream>) {
        let now = self.now();
        match io {
            Io::Http {
                id,
                friends,
                result,
            } => {
                let (status, body) = result.unwrap_or((0, Bytes::new()));
                if let Err(e) = self.machine.handle_http_response(now, id, status, &body) {
                    tracing::warn!(error = %e, "handling an HTTP response failed");
                }
                if friends && !(200..300).contains(&status) {
                    for w in self.friends_waiters.drain(..) {
                        drop(w.send(Err(ClientError::Status(status, String::new()))));
                    }
                }
            }
            Io::Opened { generation, result } => {
                if generation != self.generation {
                    return;
                }
                self.connecting = None;
                match *result {
                    Ok(ws) => {
                        self.attach(ws, now);
                        if let Err(e) = self.machine.handle_connected(now) {
                            tracing::warn!(error = %e, "handle_connected failed");
                        }
                    }
                    Err(error) => {
                        tracing::debug!(%error, "WebSocket open failed");
                        if let Some(tap) = &self.tap {
                            tap.upgrade_failed(&error.to_string());
                        }
                        if unauthorized(&error) {
                            // The machine re-authenticates once, or ends in `AuthFailed`.
                            self.machine.handle_connect_refused(now, 401);
                        } else {
                            self.machine.handle_disconnected(now);
                        }
                    }
                }
            }
            Io::Text { generation, text } => {
                if let Some(tap) = &self.tap {
                    tap.frame_in(&text);
                }
                if let Some(s) = self.socket.as_mut().filter(|s| s.generation == generation) {
                    s.last_inbound_ms = now;
                    if let Err(e) = self.machine.handle_text(now, &text) {
                        tracing::warn!(error = %e, "handling a frame failed");
                    }
                }
            }
            Io::Alive { generation } => {
                if let Some(s) = self.socket.as_mut().filter(|s| s.generation == generation) {
                    s.last_inbound_ms = now;
                }
            }
            Io::Closed { generation } => {
                if self
                    .socket
                    .as_ref()
                    .is_some_and(|s| s.generation == generation)
                {
                    self.close_socket();
                    self.machine.handle_disconnected(now);
                }
            }
        }
    }

    fn attach(&mut self, ws: WsStream<<N::Connector as Connector>::Stream>, now: u64) {
        let generation = self.generation;
        let (mut sink, mut stream) = ws.split();
        let (writer, mut frames) = mpsc::channel::<WsMessage>(MAX_QUEUED_FRAMES);
        tokio::spawn(async move {
            while let Some(message) = frames.recv().await {
                if sink.send(message).await.is_err() {
                    return;
                }
            }
            drop(sink.close().await);
        });
        let io = self.io_tx.clone();
        let reader = tokio::spawn(async move {
            while let Some(message) = stream.next().await {
                let event = match message {
                    Ok(WsMessage::Text(text)) => Io::Text {
                        generation,
                        text: text.to_string(),
                    },
                    Ok(WsMessage::Close(_)) | Err(_) => break,
                    Ok(_) => Io::Alive { generation },
                };
                if io.send(event).await.is_err() {
                    return;
                }
            }
            drop(io.send(Io::Closed { generation }).await);
        });
        self.socket = Some(Socket {
            generation,
            writer,
            reader,
            last_inbound_ms: now,
        });
    }

    fn close_socket(&mut self) {
        self.generation += 1;
        if let Some(task) = self.connecting.take() {
            task.abort();
        }
        // Dropping the writer queue makes the writer send a close frame and end.
        self.socket = None;
    }

    fn open(&mut self, user_uuid: &str, auth: &WsAuth) {
        self.close_socket();
        let generation = self.generation;
        let query = match auth {
            WsAuth::Ticket(t) => format!("ticket={}", encode_query(t)),
            WsAuth::Token(t) => format!("token={}", encode_query(t)),
        };
        let path = format!(
            "{}?user_uuid={}&{query}",
            wire::http::paths::WS,
            encode_query(user_uuid)
        );
        let http = self.http.clone();
        let io = self.io_tx.clone();
        self.connecting = Some(tokio::spawn(async move {
            let result = Box::new(http.connect_ws(WsRequest::new(path)).await);
            drop(io.send(Io::Opened { generation, result }).await);
        }));
    }

    /// Executes every queued output of the machine, in the documented order.
    fn drain(&mut self) {
        loop {
            let mut progressed = false;
            while let Some(request) = self.machine.poll_http() {
                progressed = true;
                self.perform(request);
            }
            while let Some(command) = self.machine.poll_connection() {
                progressed = true;
                match command {
                    ConnCommand::Connect { user_uuid, auth } => self.open(&user_uuid, &auth),
                    ConnCommand::Close => self.close_socket(),
                }
            }
            while let Some(frame) = self.machine.poll_transmit() {
                progressed = true;
                self.transmit(&frame);
            }
            while let Some(event) = self.machine.poll_event() {
                progressed = true;
                self.deliver(&event);
            }
            if !progressed {
                break;
            }
        }
    }

    fn transmit(&mut self, frame: &ClientFrame) {
        let Some(socket) = &self.socket else { return };
        let mut messages = vec![WsMessage::text(frame.encode())];
        if matches!(frame, ClientFrame::Ping(_)) {
            messages.push(WsMessage::Ping(Bytes::new()));
        }
        for m in messages {
            if socket.writer.try_send(m).is_err() {
                tracing::debug!("socket writer full or gone: dropping the socket");
                let now = self.now();
                self.close_socket();
                self.machine.handle_disconnected(now);
                return;
            }
        }
    }

    fn perform(&self, request: machine::HttpRequest) {
        let friends = request.path == wire::http::paths::FRIENDS;
        let method = match request.method {
            Method::Get => http::Method::GET,
            Method::Post => http::Method::POST,
            Method::Put => http::Method::PUT,
        };
        let mut out = HttpRequest::new(method, request.path);
        if request.bearer
            && let Some(token) = self.machine.bearer_token()
        {
            out = out.bearer(token);
        }
        if let Some(body) = &request.body {
            match out.clone().json(body) {
                Ok(with_body) => out = with_body,
                Err(e) => tracing::warn!(error = %e, "request body not encodable"),
            }
        }
        let http = self.http.clone();
        let io = self.io_tx.clone();
        let id = request.id;
        let tap = self.tap.clone();
        tokio::spawn(async move {
            let (method, path) = (out.method().clone(), out.path_and_query().to_owned());
            let result = http
                .send(out)
                .await
                .ok()
                .map(|r| (r.status.as_u16(), r.body));
            if let Some(tap) = &tap {
                let (status, body) = result.as_ref().map_or((0, &[][..]), |(s, b)| (*s, &b[..]));
                tap.http(&method, &path, status, body);
            }
            drop(
                io.send(Io::Http {
                    id,
                    friends,
                    result,
                })
                .await,
            );
        });
    }

    fn deliver(&mut self, event: &Event) {
        match event {
            Event::Authenticated {
                alias_id, nickname, ..
            } => {
                for w in self.auth_waiters.drain(..) {
                    drop(w.send(Ok(Some((alias_id.clone(), nickname.clone())))));
                }
            }
            Event::AuthFailed(f) => {
                for w in self.auth_waiters.drain(..) {
                    drop(w.send(Err(ClientError::Auth(format!("{f:?}")))));
                }
            }
            Event::ContactsSynced(list) => {
                for w in self.friends_waiters.drain(..) {
                    drop(w.send(Ok(list.clone())));
                }
            }
            Event::NetworkState(machine::NetworkState::Connected) => {
                for w in self.connected_waiters.drain(..) {
                    let _ = w.send(());
                }
            }
            _ => {}
        }
        self.hub.emit(event);
    }
}

fn unauthorized(error: &WsError) -> bool {
    matches!(
        error,
        WsError::Handshake(tokio_tungstenite::tungstenite::Error::Http(response))
            if response.status() == http::StatusCode::UNAUTHORIZED
    )
}

/// Percent-encodes a query value (RFC 3986 unreserved characters pass).
fn encode_query(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A sorted map alias kept for callers that index listeners.
pub(super) type Listeners = BTreeMap<u64, (super::EventKind, super::Listener)>;
