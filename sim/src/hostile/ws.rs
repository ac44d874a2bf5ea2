//! A WebSocket spoken by hand (RFC 6455 framing over a turmoil TCP stream): what a raw client
//! sends needs no client library to be well-formed, and what it reads is every frame the
//! relay sent.

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, ReadHalf, WriteHalf};
use turmoil::net::TcpStream;

use super::http::RawAccount;
use crate::bounds::{RELAY, RELAY_PORT};

/// Timeout of one raw write (a blocked write means the relay stopped reading).
const WRITE_TIMEOUT_MS: u64 = 1_000;

/// WebSocket opcodes (RFC 6455 §5.2).
pub(crate) mod op {
    pub(crate) const TEXT: u8 = 0x1;
    pub(crate) const BINARY: u8 = 0x2;
    pub(crate) const CLOSE: u8 = 0x8;
    pub(crate) const PING: u8 = 0x9;
}

/// A frame read from the relay.
#[derive(Debug)]
pub(crate) struct Frame {
    pub(crate) opcode: u8,
    pub(crate) payload: Vec<u8>,
}

impl Frame {
    pub(crate) fn json(&self) -> Option<Value> {
        (self.opcode == op::TEXT)
            .then(|| serde_json::from_slice(&self.payload).ok())
            .flatten()
    }
    /// The close code of a close frame.
    pub(crate) fn close_code(&self) -> Option<u16> {
        (self.opcode == op::CLOSE && self.payload.len() >= 2)
            .then(|| u16::from_be_bytes([self.payload[0], self.payload[1]]))
    }
}

/// The read side of a raw WebSocket.
pub(crate) struct RawReader {
    half: ReadHalf<TcpStream>,
    buf: Vec<u8>,
}

/// The write side of a raw WebSocket (client frames are masked with a counter).
pub(crate) struct RawWriter {
    pub(crate) half: WriteHalf<TcpStream>,
    pub(crate) mask: u32,
}

impl std::fmt::Debug for RawWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RawWriter")
    }
}

/// Opens `/ws?{query}` by hand: `Ok(Some(..))` upgraded, `Ok(None)` refused (with the
/// status), `Err` when the TCP connection failed.
pub(crate) async fn open_ws(query: &str) -> std::io::Result<Result<(RawReader, RawWriter), u16>> {
    open_ws_at(RELAY, query).await
}

/// [`open_ws`] with a `Sec-WebSocket-Protocol` header (`bearer, <token>`, as the Android
/// client presents its token).
pub(crate) async fn open_ws_protocol(
    query: &str,
    protocol: &str,
) -> std::io::Result<Result<(RawReader, RawWriter), u16>> {
    open_ws_with(RELAY, query, Some(protocol)).await
}

/// [`open_ws`] on `host` (the active relay itself, past the failover topology's balancer).
pub(crate) async fn open_ws_at(
    host: &str,
    query: &str,
) -> std::io::Result<Result<(RawReader, RawWriter), u16>> {
    open_ws_with(host, query, None).await
}

async fn open_ws_with(
    host: &str,
    query: &str,
    protocol: Option<&str>,
) -> std::io::Result<Result<(RawReader, RawWriter), u16>> {
    let stream = TcpStream::connect((host, RELAY_PORT)).await?;
    let (read, mut write) = tokio::io::split(stream);
    let protocol = protocol
        .map(|p| format!("Sec-WebSocket-Protocol: {p}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "GET /ws?{query} HTTP/1.1\r\nHost: {RELAY}:{RELAY_PORT}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: c2ltdWxhdGVkLXJhdy1rZXk=\r\nSec-WebSocket-Version: 13\r\n{protocol}\r\n"
    );
    write.write_all(request.as_bytes()).await?;
    let mut reader = RawReader {
        half: read,
        buf: Vec::new(),
    };
    let head = reader.head().await?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .unwrap_or(0);
    if status != 101 {
        return Ok(Err(status));
    }
    Ok(Ok((
        reader,
        RawWriter {
            half: write,
            mask: 0x5a5a_0001,
        },
    )))
}

impl RawReader {
    async fn fill(&mut self) -> std::io::Result<bool> {
        let mut chunk = [0u8; 16 * 1024];
        let n = self.half.read(&mut chunk).await?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n > 0)
    }

    /// The HTTP response head (status line and headers).
    async fn head(&mut self) -> std::io::Result<String> {
        loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.buf[..end]).into_owned();
                self.buf.drain(..end + 4);
                return Ok(head);
            }
            if !self.fill().await? {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
    }

    async fn need(&mut self, n: usize) -> std::io::Result<bool> {
        while self.buf.len() < n {
            if !self.fill().await? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The next frame (`None`: the connection ended).
    pub(crate) async fn next(&mut self) -> std::io::Result<Option<Frame>> {
        if !self.need(2).await? {
            return Ok(None);
        }
        let opcode = self.buf[0] & 0x0f;
        let len7 = usize::from(self.buf[1] & 0x7f);
        let (len, head) = match len7 {
            126 => {
                if !self.need(4).await? {
                    return Ok(None);
                }
                (
                    usize::from(u16::from_be_bytes([self.buf[2], self.buf[3]])),
                    4,
                )
            }
            127 => {
                if !self.need(10).await? {
                    return Ok(None);
                }
                let mut b = [0u8; 8];
                b.copy_from_slice(&self.buf[2..10]);
                (
                    usize::try_from(u64::from_be_bytes(b)).unwrap_or(usize::MAX),
                    10,
                )
            }
            n => (n, 2),
        };
        if !self.need(head + len).await? {
            return Ok(None);
        }
        let payload = self.buf[head..head + len].to_vec();
        self.buf.drain(..head + len);
        Ok(Some(Frame { opcode, payload }))
    }
}

impl RawWriter {
    fn encode(&mut self, opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(payload.len() + 14);
        out.push(0x80 | opcode);
        match payload.len() {
            n if n < 126 => out.push(0x80 | u8::try_from(n).unwrap_or(0)),
            n if n <= usize::from(u16::MAX) => {
                out.push(0x80 | 126);
                out.extend_from_slice(&u16::try_from(n).unwrap_or(0).to_be_bytes());
            }
            n => {
                out.push(0x80 | 127);
                out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        self.mask = self.mask.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let key = self.mask.to_be_bytes();
        out.extend_from_slice(&key);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        out
    }

    /// Writes one frame; `false` when the write did not complete within
    /// [`WRITE_TIMEOUT_MS`] or failed.
    pub(crate) async fn send(&mut self, opcode: u8, payload: &[u8]) -> bool {
        let bytes = self.encode(opcode, payload);
        matches!(
            tokio::time::timeout(
                Duration::from_millis(WRITE_TIMEOUT_MS),
                self.half.write_all(&bytes)
            )
            .await,
            Ok(Ok(()))
        )
    }

    /// Writes one text frame of `value`.
    pub(crate) async fn text(&mut self, value: &Value) -> bool {
        self.send(op::TEXT, value.to_string().as_bytes()).await
    }
}

/// The upgrade query of `account`'s own socket.
pub(crate) fn ws_query(account: &RawAccount) -> String {
    format!("user_uuid={}&token={}", account.uuid, account.token)
}
