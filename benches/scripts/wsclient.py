"""The bench scripts' client of a relay on loopback: one HTTP request per connection
(`request`), an account registered and signed in (`register`, `login`, `signed_up`), two made
friends (`befriend`), and a WebSocket of text frames (`Socket`: masked, as a client must be; it
answers the relay's pings while it reads). Enough for measuring a relay as an outsider, not a
general client. Needs Python's `cryptography` package."""
import base64, http.client, json, os, socket, struct, threading

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, x25519

RAW = serialization.Encoding.Raw, serialization.PublicFormat.Raw


def b64(b):
    return base64.b64encode(b).decode()


def request(port, method, path, body=None, token=None, src=None):
    """One request to 127.0.0.1:`port` (a JSON body, a bearer token, from the local address
    `src`); returns the status and the raw body."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60,
                                   source_address=(src, 0) if src else None)
    h = {"Content-Type": "application/json"}
    if token:
        h["Authorization"] = "Bearer " + token
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    r = c.getresponse()
    text = r.read()
    c.close()
    return r.status, text


def api(port, method, path, body=None, token=None, src=None):
    """`request` to the API, its body decoded when it succeeded."""
    st, text = request(port, method, path, body, token, src)
    return st, (json.loads(text) if text and st < 300 else text)


def register(port, nick, src=None):
    """A new account (fresh keys) registered from `src`: uuid, alias, signing key, src."""
    sk, xk = ed25519.Ed25519PrivateKey.generate(), x25519.X25519PrivateKey.generate()
    st, reg = api(port, "POST", "/api/v1/register", {
        "ed25519_public_key": b64(sk.public_key().public_bytes(*RAW)),
        "x25519_public_key": b64(xk.public_key().public_bytes(*RAW)), "nickname": nick},
        src=src)
    assert st in (200, 201), (st, reg)
    return {"uuid": reg["uuid"], "alias": reg["alias_id"], "key": sk, "src": src}


def login(port, a):
    """Signs account `a` in (challenge, signature): its token goes in `a["token"]`."""
    src = a.get("src")
    _, ch = api(port, "POST", "/api/v1/auth/challenge", {"user_uuid": a["uuid"]}, src=src)
    st, v = api(port, "POST", "/api/v1/auth/verify", {"user_uuid": a["uuid"],
                "challenge": ch["challenge"],
                "signature": b64(a["key"].sign(ch["challenge"].encode()))}, src=src)
    assert st == 200, (st, v)
    a["token"] = v["token"]


def signed_up(port, nick, src=None):
    """`register` then `login`."""
    a = register(port, nick, src)
    login(port, a)
    return a


def befriend(port, x, y):
    """`x` asks `y`, `y` accepts; returns their conversation's id."""
    st, req = api(port, "POST", "/api/v1/friends/request", {"to_alias_id": y["alias"]},
                  x["token"], src=x.get("src"))
    assert st in (200, 201), (st, req)
    st, acc = api(port, "POST", f"/api/v1/friends/{req['friendship_id']}/accept", {},
                  y["token"], src=y.get("src"))
    assert st == 200, (st, acc)
    return acc["conversation_id"]


def mask_bytes(body):
    mask = os.urandom(4)
    n = len(body)
    key = (mask * (n // 4 + 1))[:n]
    return mask + (int.from_bytes(body, "big") ^ int.from_bytes(key, "big")).to_bytes(n, "big")


class Socket:
    """One upgraded connection to the relay on 127.0.0.1:`port` (`/ws?` + `query`), from the
    local address `src`."""

    def __init__(self, port, query, src="127.0.0.1"):
        self.lock = threading.Lock()
        self.s = socket.create_connection(("127.0.0.1", port), source_address=(src, 0))
        # Each frame is one write; without this a frame written while the previous one is not
        # yet acknowledged waits for the peer's delayed ACK (40 ms on Linux).
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.s.sendall((f"GET /ws?{query} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                        "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                        "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            chunk = self.s.recv(1)
            if not chunk:
                raise ConnectionError("the relay closed the connection during the upgrade")
            head += chunk
        assert head.split()[1] == b"101", head
        self.buf = b""

    def frame(self, opcode, body):
        n = len(body)
        if n < 126:
            head = bytes([0x80 | opcode, 0x80 | n])
        elif n < 65536:
            head = bytes([0x80 | opcode, 0x80 | 126]) + struct.pack(">H", n)
        else:
            head = bytes([0x80 | opcode, 0x80 | 127]) + struct.pack(">Q", n)
        with self.lock:
            self.s.sendall(head + mask_bytes(body))

    def send(self, obj):
        self.frame(1, json.dumps(obj, separators=(",", ":")).encode())

    def exact(self, k):
        while len(self.buf) < k:
            chunk = self.s.recv(max(65536, k - len(self.buf)))
            if not chunk:
                raise ConnectionError("the relay closed the socket")
            self.buf += chunk
        out, self.buf = self.buf[:k], self.buf[k:]
        return out

    def recv(self):
        """The next text frame as JSON (answering pings on the way); None for a close."""
        while True:
            b0, b1 = self.exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self.exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self.exact(8))[0]
            body = self.exact(n)
            op = b0 & 0x0F
            if op == 1:
                return json.loads(body)
            if op == 9:
                self.frame(10, body)
            elif op == 8:
                return None

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass
