//! `GET /ws`: authenticate through the core before upgrading, then one task per socket, on
//! its core's thread when the core has one (the socket's TCP connection moves there after the
//! upgrade, [`seam::net::MovedTcp`]), else where the upgrade was served.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::{
    extract::{ConnectInfo, RawQuery, Request, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::Response,
};
use bytes::Bytes;
use futures_util::{SinkExt as _, StreamExt as _};
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use relay_core::{ConnId, HttpResponse, WsConnect};
use seam::net::{MovedTcp, PeerAddr};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{self, Message, Utf8Bytes};
use tracing::{Instrument as _, Span, debug, info, info_span, trace};
use wire::{ClientFrame, ErrorCode, limits::MAX_FRAME_BYTES};

use super::driver::{Connected, Input, Outbound, UpgradeCore};
use super::rest::{App, relay_response};

/// Messages larger than this are refused by the WebSocket library itself (the socket is then
/// closed with 1009). Between [`MAX_FRAME_BYTES`] and this, the relay answers with an
/// `error` frame `FRAME_TOO_LARGE` and the socket stays open.
pub const HARD_MAX_MESSAGE_BYTES: usize = 4 * MAX_FRAME_BYTES;

/// After sending a close frame, how long to wait for the client's close reply, in ms.
pub const CLOSE_LINGER_MS: u64 = 2_000;
/// What the WebSocket library reserves per socket to read frames into (its default, 128 KiB,
/// would make an idle connection cost ~136 KB). A larger frame grows the buffer
/// to its size, up to [`HARD_MAX_MESSAGE_BYTES`].
pub const WS_READ_BUFFER_BYTES: usize = 4 * 1024;
/// Encoded frames are collected up to this many bytes before the library writes them to the
/// socket (a flush writes whatever is collected).
pub const WS_WRITE_BUFFER_BYTES: usize = 4 * 1024;
/// The library's write buffer never grows past this (one frame of the largest size the relay
/// sends, plus [`WS_WRITE_BUFFER_BYTES`]); the per-socket queue in front of it is bounded by
/// [`ServeLimits::outbound_queue_bytes`](seam::net::ServeLimits::outbound_queue_bytes).
pub const WS_MAX_WRITE_BUFFER_BYTES: usize = WS_WRITE_BUFFER_BYTES + HARD_MAX_MESSAGE_BYTES;
/// RFC 6455 "message too big".
const CLOSE_TOO_BIG: u16 = 1009;
/// RFC 6455 "going away".
const CLOSE_GOING_AWAY: u16 = 1001;
/// RFC 6455 "try again later": the client stopped reading.
const CLOSE_TRY_AGAIN_LATER: u16 = 1013;
/// After a write, the socket task pings (in the write's own flush) unless a ping is
/// unanswered or it sent one less than this long ago (or the write deadline, if shorter): a
/// busy socket is pinged about once a second, not once per write, so a client that stops
/// reading is found at most this long later than the deadline alone would find it.
pub(crate) const WRITE_PING_GAP_MS: u64 = 1_000;

/// The upgrade: check the handshake (RFC 6455 §4.2.1), ask the core to authenticate (query
/// and `Sec-WebSocket-Protocol`); refuse with its response, or upgrade (echoing the
/// sub-protocol it chose) and run the socket.
pub(super) async fn upgrade(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<PeerAddr>,
    RawQuery(query): RawQuery,
    mut request: Request,
) -> Response {
    let accept = match handshake(request.headers()) {
        Ok(accept) => accept,
        Err(refusal) => return relay_response(refusal),
    };
    // The core serving the account now: this socket belongs to its term, and ends with it.
    let Some(cores) = app.cores() else {
        return app.refusal();
    };
    let core = match cores.for_upgrade(query.as_deref().unwrap_or_default()) {
        Ok(core) => core,
        // A cluster node passes an upgrade for a shard another node serves on to it, once.
        Err(shard) => match &app.onward {
            Some(onward) if onward.client_of(request.headers()).is_none() => {
                let client = app.client_network(&peer, request.headers());
                return onward
                    .upgrade(shard, request, &client)
                    .await
                    .unwrap_or_else(|| app.not_here());
            }
            _ => return app.not_here(),
        },
    };
    let Some(on_upgrade) = request.extensions_mut().remove::<OnUpgrade>() else {
        return relay_response(HttpResponse::error(
            400,
            &ErrorCode::BAD_REQUEST,
            "this connection cannot be upgraded to a WebSocket (HTTP/1.1 is needed)",
        ));
    };
    let connected = match authenticate(&app, &core, query, request.headers()).await {
        Ok(connected) => connected,
        Err(refusal) => return refusal,
    };
    serve_upgraded(&app, core, connected, &accept, on_upgrade)
}

/// Answers an accepted upgrade with 101 and spawns the socket's task, which runs once Hyper
/// hands the connection over.
fn serve_upgraded(
    app: &App,
    core: UpgradeCore,
    connected: Connected,
    accept: &HeaderValue,
    on_upgrade: OnUpgrade,
) -> Response {
    let UpgradeCore {
        shard,
        inputs,
        home,
    } = core;
    let guard = DisconnectGuard {
        conn: connected.conn,
        inputs: inputs.clone(),
        slow: false,
    };
    let response = switching_protocols(accept, connected.subprotocol);
    // Connection ids are per core: the shard tells a sharded relay's sockets apart.
    let span = info_span!("ws", shard = shard.0, conn = connected.conn.0, user = %connected.user);
    let socket = Socket {
        connected,
        inputs,
        guard,
        on_core_threads: Arc::clone(&app.on_core_threads),
        timing: Timing {
            deadline: Duration::from_millis(app.limits.write_deadline_ms),
            ping_every: Duration::from_millis(app.limits.ws_ping_interval_ms.max(1)),
        },
    };
    // Hyper hands the connection over once the response is written.
    let upgraded = async move {
        match on_upgrade.await {
            Ok(upgraded) => socket.serve(upgraded, home).await,
            // The guard reports the connection gone.
            Err(error) => debug!(%error, "websocket upgrade failed"),
        }
    };
    tokio::spawn(upgraded.instrument(span));
    response
}

/// Asks `core` (the one of the account the query names) to authenticate the upgrade: the
/// accepted connection, or the refusal.
async fn authenticate(
    app: &App,
    core: &UpgradeCore,
    query: Option<String>,
    headers: &HeaderMap,
) -> Result<Connected, Response> {
    #[allow(
        clippy::needless_update,
        reason = "relay-core is growing: new WsConnect fields keep their defaults here"
    )]
    let ws = WsConnect {
        query: query.unwrap_or_default(),
        protocol: headers
            .get(header::SEC_WEBSOCKET_PROTOCOL)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        ..WsConnect::default()
    };
    let (reply, answer) = oneshot::channel();
    if core
        .inputs
        .send(Input::Connect { ws, reply })
        .await
        .is_err()
    {
        return Err(app.refusal());
    }
    let connected = match answer.await {
        Ok(Ok(connected)) => connected,
        Ok(Err(refusal)) => return Err(relay_response(refusal)),
        Err(_) => return Err(app.refusal()),
    };
    Ok(connected)
}

/// The checks of an upgrade's handshake (RFC 6455 §4.2.1; the method is the router's):
/// the `Sec-WebSocket-Accept` value, or the refusal.
pub(super) fn handshake(headers: &HeaderMap) -> Result<HeaderValue, HttpResponse> {
    let has = |name: header::HeaderName, token: &str| {
        headers.get_all(name).iter().any(|value| {
            value
                .as_bytes()
                .split(|&b| b == b',')
                .any(|part| part.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
        })
    };
    let refuse = |message: &str| HttpResponse::error(400, &ErrorCode::BAD_REQUEST, message);
    if !has(header::CONNECTION, "upgrade") {
        return Err(refuse(
            "GET /ws is a WebSocket upgrade: the Connection header must include `upgrade`",
        ));
    }
    if !has(header::UPGRADE, "websocket") {
        return Err(refuse(
            "GET /ws is a WebSocket upgrade: the Upgrade header must be `websocket`",
        ));
    }
    if !has(header::SEC_WEBSOCKET_VERSION, "13") {
        return Err(refuse("Sec-WebSocket-Version must be 13"));
    }
    let Some(key) = headers.get(header::SEC_WEBSOCKET_KEY) else {
        return Err(refuse("the Sec-WebSocket-Key header is missing"));
    };
    HeaderValue::from_str(&derive_accept_key(key.as_bytes()))
        .map_err(|_| refuse("the Sec-WebSocket-Key header is not valid"))
}

/// The `101 Switching Protocols` answer, with the sub-protocol the relay chose, if any.
pub(super) fn switching_protocols(accept: &HeaderValue, protocol: Option<&str>) -> Response {
    let mut response = Response::new(axum::body::Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept.clone());
    if let Some(protocol) = protocol.and_then(|p| HeaderValue::from_str(p).ok()) {
        headers.insert(header::SEC_WEBSOCKET_PROTOCOL, protocol);
    }
    response
}

/// The library's settings for a relay socket (see the constants above).
fn socket_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(WS_READ_BUFFER_BYTES)
        .write_buffer_size(WS_WRITE_BUFFER_BYTES)
        .max_write_buffer_size(WS_MAX_WRITE_BUFFER_BYTES)
        .max_message_size(Some(HARD_MAX_MESSAGE_BYTES))
        .max_frame_size(Some(HARD_MAX_MESSAGE_BYTES))
}

/// An accepted socket waiting for its connection.
struct Socket {
    connected: Connected,
    inputs: mpsc::Sender<Input>,
    guard: DisconnectGuard,
    /// Counts the sockets served on their core's thread.
    on_core_threads: Arc<AtomicU64>,
    timing: Timing,
}

impl Socket {
    /// Serves the upgraded connection: on `home`, the thread of its core, when it has one and
    /// the connection is a tokio TCP one (moved there off this runtime); else here.
    async fn serve(self, upgraded: Upgraded, home: Option<tokio::runtime::Handle>) {
        let upgraded = match home {
            Some(home) => match MovedTcp::take(upgraded) {
                Ok(Ok(moved)) => {
                    let on_home = async move {
                        match moved.register() {
                            Ok((io, read)) => {
                                self.on_core_threads.fetch_add(1, Ordering::Relaxed);
                                let socket = WebSocketStream::from_partially_read(
                                    io,
                                    read.to_vec(),
                                    Role::Server,
                                    Some(socket_config()),
                                );
                                self.run(socket.await).await;
                            }
                            Err(error) => debug!(%error, "websocket not registered on its core"),
                        }
                    };
                    home.spawn(on_home.instrument(Span::current()));
                    return;
                }
                Ok(Err(error)) => {
                    debug!(%error, "websocket not moved to its core");
                    return;
                }
                Err(upgraded) => upgraded,
            },
            None => upgraded,
        };
        let io = TokioIo::new(upgraded);
        let socket =
            WebSocketStream::from_raw_socket(io, Role::Server, Some(socket_config())).await;
        self.run(socket).await;
    }

    async fn run<S: AsyncRead + AsyncWrite + Unpin>(self, socket: WebSocketStream<S>) {
        let Self {
            connected,
            inputs,
            mut guard,
            timing,
            ..
        } = self;
        let why = run_socket(socket, connected, &inputs, timing).await;
        guard.slow = matches!(why, NOT_READING | PAST_DEADLINE);
        drop(guard);
    }
}

/// Reports the connection gone to the core when the socket task ends **or never starts**
/// (a failed upgrade drops the `on_upgrade` closure, and this with it).
struct DisconnectGuard {
    conn: ConnId,
    inputs: mpsc::Sender<Input>,
    /// The socket task ended it for not reading ([`Input::Disconnect`]).
    slow: bool,
}

impl Drop for DisconnectGuard {
    fn drop(&mut self) {
        let input = Input::Disconnect {
            conn: self.conn,
            slow: self.slow,
        };
        match self.inputs.try_send(input) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(input)) => {
                // The input queue is full: wait for room on a task of its own.
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    let inputs = self.inputs.clone();
                    runtime.spawn(async move {
                        let _ = inputs.send(input).await;
                    });
                }
            }
        }
    }
}

/// One socket: frames in go to the core; the core's outbound queue is written out in order.
///
/// Every write must finish within `deadline` ([`ServeLimits::write_deadline_ms`]): a client
/// that stops reading fills its TCP window and then the library's write buffer, and the write
/// that does not finish in time is the end of the connection. A client that stops reading
/// *before* that (its buffers absorb a few frames, so every write completes) is found with a
/// ping: a write carries a Ping in its flush unless one is already unanswered or was sent less
/// than [`WRITE_PING_GAP_MS`] (or `deadline`) ago, and a client
/// that neither answers it (every WebSocket client answers pings as it reads, RFC 6455 §5.5.2)
/// nor sends anything at all within `deadline` is taken to have stopped reading. Either way the
/// socket task ends, the socket and everything queued for it are freed, and the core forgets
/// the connection; what the client had not acknowledged stays queued in the core for its next
/// `sync`.
///
/// Besides, the task pings every `ping_every` ([`ServeLimits::ws_ping_interval_ms`]) of its own
/// accord, unless a ping is already unanswered: an idle socket, or one whose client only sends
/// (application-level `ping` frames included), is held to the same answer within `deadline`,
/// and NAT bindings on the way stay open.
///
/// A client's Close is answered with a Close echoing its code (RFC 6455 §5.5.1), then the
/// relay closes the TCP connection.
///
/// Returns why the socket ended.
///
/// [`ServeLimits::write_deadline_ms`]: seam::net::ServeLimits::write_deadline_ms
/// [`ServeLimits::ws_ping_interval_ms`]: seam::net::ServeLimits::ws_ping_interval_ms
async fn run_socket<S: AsyncRead + AsyncWrite + Unpin>(
    mut socket: WebSocketStream<S>,
    connected: Connected,
    inputs: &mpsc::Sender<Input>,
    timing: Timing,
) -> &'static str {
    let Connected {
        conn, mut outbound, ..
    } = connected;
    let Timing {
        deadline,
        ping_every,
    } = timing;
    info!("websocket open");
    let mut pings = Pings::new(deadline);
    let next_ping = tokio::time::sleep(ping_every);
    tokio::pin!(next_ping);
    let why = loop {
        tokio::select! {
            biased;
            out = outbound.recv() => {
                let written = write_out(&mut socket, &mut outbound, out, &mut pings, deadline);
                if let Some(why) = written.await {
                    break why;
                }
            },
            () = stuck(&mut pings.unanswered) => break not_reading(&mut socket, deadline).await,
            () = stuck(&mut pings.gap) => pings.gap = None,
            () = &mut next_ping => {
                next_ping.set(tokio::time::sleep(ping_every));
                if let Some(why) = ping(&mut socket, &mut pings, deadline).await {
                    break why;
                }
            },
            message = socket.next() => {
                if pings.unanswered.is_some() {
                    pings.unanswered = Some(Box::pin(tokio::time::sleep(deadline)));
                }
                let read = read_in(&mut socket, message, conn, inputs, &mut pings.unanswered, deadline);
                if let Some(why) = read.await {
                    break why;
                }
            },
        }
    };
    info!(why, "websocket closed");
    why
}

/// Why a socket task ended a client that answered no ping and sent nothing in time.
const NOT_READING: &str = "not reading";
/// Why a socket task ended a client whose write did not finish in time.
const PAST_DEADLINE: &str = "write deadline passed";

/// The deadline of an unanswered ping.
type Unanswered = std::pin::Pin<Box<tokio::time::Sleep>>;

/// A socket task's pings: the one unanswered, if any, and the gap after the last one.
struct Pings {
    /// While a ping is unanswered: the write deadline, restarted by anything the client sends.
    unanswered: Option<Unanswered>,
    /// Until the gap after the last ping has passed (the socket task's loop clears it).
    gap: Option<Unanswered>,
    /// Least time between a ping and the next one that rides with a write.
    gap_length: Duration,
}

impl Pings {
    /// No ping sent yet; pings that ride with writes at least [`WRITE_PING_GAP_MS`] apart, or
    /// `deadline` if shorter.
    fn new(deadline: Duration) -> Self {
        Self {
            unanswered: None,
            gap: None,
            gap_length: deadline.min(Duration::from_millis(WRITE_PING_GAP_MS)),
        }
    }

    /// Whether the next write carries a ping: unless one is unanswered, or the last one went
    /// out less than the gap ago.
    fn due_with_write(&self) -> bool {
        self.unanswered.is_none() && self.gap.is_none()
    }

    /// A ping went out: its answer is due within `deadline`, and the next write's ping after
    /// the gap.
    fn sent(&mut self, deadline: Duration) {
        self.unanswered = Some(Box::pin(tokio::time::sleep(deadline)));
        self.gap = Some(Box::pin(tokio::time::sleep(self.gap_length)));
    }
}

/// A socket task's clocks: how long a write (or an answer to a ping) may take, and how often
/// the relay pings of its own accord.
#[derive(Debug, Clone, Copy)]
struct Timing {
    deadline: Duration,
    ping_every: Duration,
}

/// Sends a Ping unless one is already unanswered, and starts its deadline. Returns why the
/// socket must go, if the write failed.
async fn ping<S: AsyncRead + AsyncWrite + Unpin>(
    socket: &mut WebSocketStream<S>,
    pings: &mut Pings,
    deadline: Duration,
) -> Option<&'static str> {
    if pings.unanswered.is_some() {
        return None;
    }
    if let Err(why) = send_within(socket, Message::Ping(Bytes::new()), deadline).await {
        return Some(why);
    }
    pings.sent(deadline);
    None
}

/// What the core queued for the socket (`None`: the core let go of it): writes it with
/// everything queued after it, and a ping when one is due ([`Pings::due_with_write`]); or
/// closes. Returns why the socket must go, if it must.
async fn write_out<S: AsyncRead + AsyncWrite + Unpin>(
    socket: &mut WebSocketStream<S>,
    outbound: &mut mpsc::Receiver<Outbound>,
    out: Option<Outbound>,
    pings: &mut Pings,
    deadline: Duration,
) -> Option<&'static str> {
    let Some(first) = out else {
        close_handshake(socket, CLOSE_GOING_AWAY, "closed by the relay", deadline).await;
        return Some("closed by the relay");
    };
    let ping = pings.due_with_write();
    match write_batch(socket, outbound, (first, ping), deadline).await {
        Ok(None) => {
            if ping {
                pings.sent(deadline);
            }
            None
        }
        Ok(Some((code, reason))) => {
            close_handshake(socket, code, reason, deadline).await;
            Some(reason)
        }
        Err(why) => Some(why),
    }
}

/// The client answered no ping and sent nothing within the deadline: says so with a close
/// frame (within [`CLOSE_LINGER_MS`], without waiting for a reply) and gives the reason.
async fn not_reading<S: AsyncRead + AsyncWrite + Unpin>(
    socket: &mut WebSocketStream<S>,
    deadline: Duration,
) -> &'static str {
    debug!(
        deadline_ms = deadline.as_millis(),
        "no answer to a ping and nothing received: the client is not reading"
    );
    // Said once, briefly: a client that does not read will not see it.
    let linger = Duration::from_millis(CLOSE_LINGER_MS);
    let _ = send_within(socket, close(CLOSE_TRY_AGAIN_LATER, "not reading"), linger).await;
    NOT_READING
}

/// What the client sent: frames are decoded and handed to the core, a pong clears the
/// unanswered ping, a close is answered. Returns why the socket must go, if it must.
async fn read_in<S: AsyncRead + AsyncWrite + Unpin>(
    socket: &mut WebSocketStream<S>,
    message: Option<Result<Message, tungstenite::Error>>,
    conn: ConnId,
    inputs: &mpsc::Sender<Input>,
    unanswered: &mut Option<Unanswered>,
    deadline: Duration,
) -> Option<&'static str> {
    match message {
        // Decoded here, on the socket's task, not on the relay's: the relay charges
        // the frame (or the failure) to the connection's budget before anything else.
        Some(Ok(Message::Text(text))) => {
            trace!(bytes = text.len(), "text frame in");
            let decoded = ClientFrame::decode(text.as_str());
            if inputs.send(Input::Frame { conn, decoded }).await.is_err() {
                return Some("relay gone");
            }
            None
        }
        Some(Ok(Message::Binary(bytes))) => {
            trace!(bytes = bytes.len(), "binary frame in");
            let decoded = ClientFrame::decode_bytes(&bytes);
            if inputs.send(Input::Frame { conn, decoded }).await.is_err() {
                return Some("relay gone");
            }
            None
        }
        Some(Ok(Message::Pong(_))) => {
            *unanswered = None;
            None
        }
        Some(Ok(Message::Ping(_) | Message::Frame(_))) => None,
        Some(Ok(Message::Close(_))) => {
            // The library queued the reply (the client's code echoed); writing it
            // out completes the handshake, and dropping the socket closes TCP.
            let _ = tokio::time::timeout(deadline, socket.flush()).await;
            Some("closed by the client")
        }
        None => Some("closed by the client"),
        Some(Err(error)) => {
            debug!(%error, "websocket read failed");
            // Over the library's limit: say why before the socket goes.
            if matches!(error, tungstenite::Error::Capacity(_)) {
                close_handshake(socket, CLOSE_TOO_BIG, "message too big", deadline).await;
            }
            Some("read failed")
        }
    }
}

/// Resolves when `timer` (an unanswered ping's deadline, or the gap after a ping) passes;
/// pends forever without one.
async fn stuck(timer: &mut Option<Unanswered>) {
    match timer {
        Some(sleep) => sleep.as_mut().await,
        None => std::future::pending().await,
    }
}

/// Frames written with one flush at most (whatever is queued, up to this).
pub const MAX_WRITE_BATCH: usize = 64;

/// Writes `first` and every frame already queued after it (up to [`MAX_WRITE_BATCH`]) with a
/// single flush, all within `deadline`, a Ping after them when `ping` says so. `Ok(Some(close))`:
/// a close came after them (the frames before it were written, no ping). `Err`: why the
/// socket must go.
async fn write_batch<S: AsyncRead + AsyncWrite + Unpin>(
    socket: &mut WebSocketStream<S>,
    outbound: &mut mpsc::Receiver<Outbound>,
    (first, ping): (Outbound, bool),
    deadline: Duration,
) -> Result<Option<(u16, &'static str)>, &'static str> {
    let mut close = None;
    // Each frame's bytes stay charged to the queue until the flush that writes it is done.
    let mut charges = Vec::new();
    let write = async {
        let mut next = Some(first);
        while let Some(out) = next.take() {
            match out {
                Outbound::Text(text, charge) => {
                    socket.feed(Message::Text(text)).await?;
                    charges.push(charge);
                }
                Outbound::Close { code, reason } => {
                    close = Some((code, reason));
                    break;
                }
            }
            if charges.len() < MAX_WRITE_BATCH {
                next = outbound.try_recv().ok();
            }
        }
        if ping && close.is_none() {
            socket.feed(Message::Ping(Bytes::new())).await?;
        }
        socket.flush().await
    };
    match tokio::time::timeout(deadline, write).await {
        Ok(Ok(())) => Ok(close),
        Ok(Err(_)) => Err("write failed"),
        Err(_) => {
            debug!(
                deadline_ms = deadline.as_millis(),
                "write deadline passed: the client is not reading"
            );
            Err(PAST_DEADLINE)
        }
    }
}

/// Sends a close frame and waits (at most [`CLOSE_LINGER_MS`]) for the client's close reply,
/// discarding anything else it still sends: closing the TCP connection with unread input
/// would reset it, and a reset can destroy frames the client has not read yet (the GOAWAY).
async fn close_handshake<S: AsyncRead + AsyncWrite + Unpin>(
    socket: &mut WebSocketStream<S>,
    code: u16,
    reason: &'static str,
    deadline: Duration,
) {
    if send_within(socket, close(code, reason), deadline)
        .await
        .is_err()
    {
        return;
    }
    let linger = async {
        while let Some(Ok(message)) = socket.next().await {
            if matches!(message, Message::Close(_)) {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_millis(CLOSE_LINGER_MS), linger).await;
}

/// Writes one message within `deadline`; the error says why the socket must go.
async fn send_within<S: AsyncRead + AsyncWrite + Unpin>(
    socket: &mut WebSocketStream<S>,
    message: Message,
    deadline: Duration,
) -> Result<(), &'static str> {
    match tokio::time::timeout(deadline, socket.send(message)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err("write failed"),
        Err(_) => {
            debug!(
                deadline_ms = deadline.as_millis(),
                "write deadline passed: the client is not reading"
            );
            Err(PAST_DEADLINE)
        }
    }
}

fn close(code: u16, reason: &'static str) -> Message {
    Message::Close(Some(CloseFrame {
        code: code.into(),
        reason: Utf8Bytes::from_static(reason),
    }))
}
