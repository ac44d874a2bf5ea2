"""HTTP/1.1 requests and RFC 6455 WebSocket framing on asyncio streams."""

import asyncio
import base64
import hashlib
import json
import struct
from urllib.parse import parse_qs, unquote, urlsplit

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MAX_HEAD_BYTES = 64 * 1024

REASONS = {
    101: "Switching Protocols", 200: "OK", 201: "Created", 204: "No Content",
    400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
    405: "Method Not Allowed", 409: "Conflict", 411: "Length Required",
    413: "Payload Too Large", 429: "Too Many Requests", 500: "Internal Server Error",
}


class BadRequest(Exception):
    """The bytes on the connection are not an HTTP/1.1 request."""


class Request:
    def __init__(self, method, target, headers, body, peer):
        self.method = method
        parts = urlsplit(target)
        self.path = unquote(parts.path)
        self.raw_path = parts.path
        self.query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        self.headers = headers
        self.body = body
        self.peer = peer

    def header(self, name, default=None):
        return self.headers.get(name.lower(), default)


async def read_request(reader, peer, max_body):
    """The next request on the connection, None at its end. Raises BadRequest, or returns
    the marker "too_large" (with the head read) when the body exceeds `max_body`."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    except asyncio.LimitOverrunError:
        raise BadRequest("head too large")
    if len(head) > MAX_HEAD_BYTES:
        raise BadRequest("head too large")
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, _version = lines[0].split(" ", 2)
    except ValueError:
        raise BadRequest("bad request line")
    headers = {}
    for line in lines[1:]:
        if not line:
            continue
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    body = b""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        chunks = []
        total = 0
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            total += size
            if total > max_body:
                return ("too_large", Request(method, target, headers, b"", peer))
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
        body = b"".join(chunks)
    elif "content-length" in headers:
        try:
            n = int(headers["content-length"])
        except ValueError:
            raise BadRequest("bad content-length")
        if n > max_body:
            # Read and drop it so the connection stays usable.
            remaining = n
            while remaining > 0:
                got = await reader.read(min(remaining, 65536))
                if not got:
                    break
                remaining -= len(got)
            return ("too_large", Request(method, target, headers, b"", peer))
        body = await reader.readexactly(n) if n else b""
    return Request(method, target, headers, body, peer)


def response_bytes(status, body=b"", content_type="application/json", extra=None):
    if isinstance(body, (dict, list)):
        body = json.dumps(body, separators=(",", ":")).encode()
    headers = [
        f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}",
        f"Content-Length: {len(body)}",
        "Access-Control-Allow-Origin: *",
        "Access-Control-Allow-Headers: Authorization, Content-Type",
        "Access-Control-Allow-Methods: GET, POST, PUT, DELETE, OPTIONS",
    ]
    if body:
        headers.append(f"Content-Type: {content_type}")
    for k, v in (extra or {}).items():
        headers.append(f"{k}: {v}")
    return ("\r\n".join(headers) + "\r\n\r\n").encode("latin-1") + body


def upgrade_bytes(key):
    accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
    return (
        "HTTP/1.1 101 Switching Protocols\r\n"
        "Upgrade: websocket\r\n"
        "Connection: Upgrade\r\n"
        f"Sec-WebSocket-Accept: {accept}\r\n\r\n"
    ).encode()


def frame_bytes(opcode, payload):
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([n])
    elif n < 65536:
        head += bytes([126]) + struct.pack("!H", n)
    else:
        head += bytes([127]) + struct.pack("!Q", n)
    return head + payload


class FrameTooLarge(Exception):
    """A frame (or a fragmented message) above the relay's limit."""


async def read_message(reader, max_bytes):
    """The next data message as (opcode, bytes), control frames as they come; None at the end
    of the stream."""
    parts = []
    first_opcode = None
    total = 0
    while True:
        try:
            b0, b1 = await reader.readexactly(2)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        fin, opcode, masked, n = b0 & 0x80, b0 & 0x0F, b1 & 0x80, b1 & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", await reader.readexactly(2))
        elif n == 127:
            (n,) = struct.unpack("!Q", await reader.readexactly(8))
        if opcode < 8 and total + n > max_bytes:
            raise FrameTooLarge(total + n)
        mask = await reader.readexactly(4) if masked else b"\0\0\0\0"
        data = bytearray(await reader.readexactly(n))
        for i in range(n):
            data[i] ^= mask[i & 3]
        if opcode >= 8:
            return (opcode, bytes(data))
        if opcode != 0:
            first_opcode = opcode
        parts.append(bytes(data))
        total += n
        if fin:
            return (first_opcode, b"".join(parts))
