"""WebSocket upgrades on a running relay, as an outside client makes them: with a fresh ticket
(A5; the relay commits its single use before the 101) and with the token in the query
(nothing stored), alternating, N of each twice. Needs Python's `cryptography` package.

    cargo build --release -p relay-server --bin relay
    target/release/relay --listen 127.0.0.1:47812 --data DIR --pow-difficulty 0 --log warn &
    python3 benches/scripts/ticket_upgrades.py 127.0.0.1 47812 300

Prints the handshake latency (p50 / p90 / p99) of each run; the ticket's own request is not
timed. The relay must accept registrations without proof of work (`--pow-difficulty 0`).
"""
import base64, json, socket, statistics, sys, time, http.client
from cryptography.hazmat.primitives.asymmetric import ed25519, x25519
from cryptography.hazmat.primitives import serialization

host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
raw = serialization.Encoding.Raw, serialization.PublicFormat.Raw
b64 = lambda b: base64.b64encode(b).decode()

def call(method, path, body=None, token=None):
    c = http.client.HTTPConnection(host, port, timeout=10)
    h = {"Content-Type": "application/json"}
    if token: h["Authorization"] = "Bearer " + token
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    r = c.getresponse(); data = r.read(); c.close()
    return r.status, (json.loads(data) if data else None)

sk = ed25519.Ed25519PrivateKey.generate()
xk = x25519.X25519PrivateKey.generate()
st, reg = call("POST", "/api/v1/register", {"ed25519_public_key": b64(sk.public_key().public_bytes(*raw)),
    "x25519_public_key": b64(xk.public_key().public_bytes(*raw)), "nickname": "m"})
assert st in (200, 201), (st, reg)
uuid = reg["uuid"]
_, ch = call("POST", "/api/v1/auth/challenge", {"user_uuid": uuid})
st, v = call("POST", "/api/v1/auth/verify", {"user_uuid": uuid, "challenge": ch["challenge"],
    "signature": b64(sk.sign(ch["challenge"].encode()))})
assert st == 200, (st, v)
token = v["token"]

def upgrade(query):
    s = socket.create_connection((host, port))
    s.sendall((f"GET /ws?{query} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
               "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
               "Sec-WebSocket-Version: 13\r\n\r\n").encode())
    line = b""
    while not line.endswith(b"\r\n"):
        line += s.recv(1)
    s.close()
    return int(line.split()[1])

def run(kind):
    lat = []
    for _ in range(n):
        if kind == "ticket":
            st, t = call("POST", "/api/v1/ws/ticket", {}, token)
            assert st == 200, (st, t)
            q = f"user_uuid={uuid}&ticket={t['ticket']}"
        else:
            q = f"user_uuid={uuid}&token={token}"
        t0 = time.perf_counter()
        code = upgrade(q)
        lat.append((time.perf_counter() - t0) * 1000)
        assert code == 101, code
        time.sleep(0.002)
    lat.sort()
    return f"{kind}: upgrade p50 {lat[len(lat)//2]:.2f} ms, p90 {lat[len(lat)*9//10]:.2f} ms, p99 {lat[len(lat)*99//100]:.2f} ms ({n} upgrades)"

print(run("token")); print(run("ticket")); print(run("token")); print(run("ticket"))
