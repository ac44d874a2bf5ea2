"""What one abuser can make a relay hold, measured from outside on loopback: unfinished media
uploads, vanity holds without an account, spent WebSocket tickets, and idle sockets the relay
should ping. Starts the relay binary itself (memory store, no proof of work) once per attack.
Needs Python's `cryptography` package.

    cargo build --release -p relay-server --bin relay
    python3 benches/scripts/abuse_bounds.py --relay-bin target/release/relay [--only uploads,holds]

Prints one line per attack: what was held before the relay refused, its RSS, and what the
others could still do. Every attack uses its own loopback source addresses (127.0.0.x).
"""
import argparse, base64, http.client, json, os, socket, subprocess, sys, tempfile, time
from cryptography.hazmat.primitives.asymmetric import ed25519, x25519
from cryptography.hazmat.primitives import serialization

RAW = serialization.Encoding.Raw, serialization.PublicFormat.Raw
PART = 5 * 1024 * 1024 + 32


def b64(b):
    return base64.b64encode(b).decode()


class Relay:
    def __init__(self, binary, extra=()):
        s = socket.socket(); s.bind(("127.0.0.1", 0)); self.port = s.getsockname()[1]; s.close()
        self.tmp = tempfile.TemporaryDirectory()
        args = [binary, "--memory", "--listen", f"127.0.0.1:{self.port}", "--pow-difficulty", "0",
                "--log", "warn", *extra]
        if "--spool-dir" in subprocess.run([binary, "--help"], capture_output=True, text=True).stdout:
            args += ["--spool-dir", self.tmp.name]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(500):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close(); return
            except OSError:
                time.sleep(0.02)
        raise SystemExit("the relay did not listen")

    def rss_mib(self):
        for line in open(f"/proc/{self.proc.pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def spooled_mib(self):
        total = 0
        for root, _, files in os.walk(self.tmp.name):
            total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
        return total / 2**20

    def stop(self):
        self.proc.kill(); self.proc.wait(); self.tmp.cleanup()


def call(relay, method, path, body=None, token=None, src="127.0.0.1", raw=None, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", relay.port, timeout=30, source_address=(src, 0))
    h = {"Content-Type": "application/json"} if raw is None else {"Content-Type": "application/octet-stream"}
    if token:
        h["Authorization"] = "Bearer " + token
    data = raw if raw is not None else (json.dumps(body) if body is not None else None)
    c.request(method, path, body=data, headers={**h, **(headers or {})})
    r = c.getresponse(); out = r.read(); c.close()
    try:
        return r.status, json.loads(out) if out else None
    except ValueError:
        return r.status, None


def account(relay, src):
    sk = ed25519.Ed25519PrivateKey.generate(); xk = x25519.X25519PrivateKey.generate()
    st, reg = call(relay, "POST", "/api/v1/register", {
        "ed25519_public_key": b64(sk.public_key().public_bytes(*RAW)),
        "x25519_public_key": b64(xk.public_key().public_bytes(*RAW)), "nickname": "m", "pow_nonce": "0"}, src=src)
    assert st in (200, 201), (st, reg)
    _, ch = call(relay, "POST", "/api/v1/auth/challenge", {"user_uuid": reg["uuid"]}, src=src)
    st, v = call(relay, "POST", "/api/v1/auth/verify", {"user_uuid": reg["uuid"], "challenge": ch["challenge"],
                 "signature": b64(sk.sign(ch["challenge"].encode()))}, src=src)
    assert st == 200, (st, v)
    return reg["uuid"], v["token"]


def uploads(binary):
    """One account opens every upload it may and fills them with full parts until refused."""
    r = Relay(binary)
    try:
        _, tok = account(r, "127.0.0.2")
        rss0 = r.rss_mib()
        ups = []
        for _ in range(16):
            st, v = call(r, "POST", "/api/v1/media/upload-parts/init", {"content_type": "application/octet-stream"},
                         tok, "127.0.0.2")
            if st != 200:
                break
            ups.append((v["upload_id"], v["media_key"]))
        stored, refusal, body = 0, None, os.urandom(PART)
        t0 = time.time()
        for n in range(1, 21):
            for up, key in ups:
                st, v = call(r, "POST", f"/api/v1/media/upload-parts/{up}/chunk?mediaKey={key}&partNumber={n}",
                             token=tok, src="127.0.0.2", raw=body)
                if st != 200:
                    refusal = (st, (v or {}).get("error")); break
                stored += PART
            if refusal:
                break
        _, est = call(r, "GET", "/api/v1/storage/estimate", token=tok, src="127.0.0.2")
        print(f"uploads: {len(ups)} open, {stored / 2**20:.0f} MiB stored in {time.time() - t0:.1f} s, then {refusal}; "
              f"estimate used {est['used_bytes'] / 2**20:.0f} MiB of quota {est['quota_bytes'] / 2**20:.0f} MiB; "
              f"RSS {rss0:.0f} -> {r.rss_mib():.0f} MiB; spooled on disk {r.spooled_mib():.0f} MiB")
    finally:
        r.stop()


def holds(binary, networks=4):
    """Networks (127.0.N.1) reserve featured aliases without an account until refused, each
    searching again for what is still listed (search shows at most 50, held ones hidden)."""
    r = Relay(binary)
    try:
        t0, held, seen = time.time(), 0, set()
        for net in range(networks):
            src, refused = f"127.0.{net}.1", False
            while not refused:
                _, items = call(r, "GET", "/api/v1/vanity/search", src=src)
                fresh = [i["alias_id"] for i in items if i["alias_id"] not in seen]
                if not fresh:
                    break
                for alias in fresh:
                    seen.add(alias)
                    st, _ = call(r, "POST", "/api/v1/vanity/reserve", {"alias_id": alias}, src=src)
                    if st != 201:
                        refused = True; break
                    held += 1
        spent = time.time() - t0
        _, left = call(r, "GET", "/api/v1/vanity/search", src="127.0.9.1")
        st = None
        if left:
            _, tok = account(r, "127.0.9.2")
            st, _ = call(r, "POST", "/api/v1/vanity/purchase", {"alias_id": left[0]["alias_id"]}, tok, "127.0.9.2")
        print(f"holds: {networks} networks held {held} featured aliases in {spent:.2f} s; search then lists "
              f"{len(left)}; a buyer elsewhere: {st}")
    finally:
        r.stop()


def open_ws(relay, uuid, tok, src):
    """A WebSocket upgrade with a fresh ticket: (status, socket, bytes read past the headers)."""
    _, v = call(relay, "POST", "/api/v1/ws/ticket", {}, tok, src)
    s = socket.create_connection(("127.0.0.1", relay.port), source_address=(src, 0))
    s.sendall((f"GET /ws?user_uuid={uuid}&ticket={v['ticket']} HTTP/1.1\r\nHost: x\r\n"
               "Upgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(4096)
        if not chunk:
            break
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    return int(head.split()[1]), s, rest


def upgrade(relay, uuid, tok, src):
    st, s, _ = open_ws(relay, uuid, tok, src)
    s.close()
    return st


def tickets(binary, n=300):
    """One account redeems tickets as fast as it can; then another account upgrades."""
    r = Relay(binary)
    try:
        burner = account(r, "127.0.0.2"); other = account(r, "127.0.0.3")
        opened, first_refusal = 0, None
        for _ in range(n):
            st = upgrade(r, *burner, "127.0.0.2")
            if st == 101:
                opened += 1
            else:
                first_refusal = st; break
        print(f"tickets: the burner opened {opened} then got {first_refusal}; another account's upgrade: "
              f"{upgrade(r, *other, '127.0.0.3')}")
    finally:
        r.stop()


def pings(binary, wait_s=60):
    """An idle authenticated socket: how many WebSocket pings the relay sends in `wait_s`."""
    r = Relay(binary)
    try:
        uuid, tok = account(r, "127.0.0.2")
        _, s, buf = open_ws(r, uuid, tok, "127.0.0.2")
        n, end = 0, time.time() + wait_s
        s.settimeout(0.5)
        while time.time() < end:
            try:
                chunk = s.recv(4096)
            except socket.timeout:
                continue
            if not chunk:
                break
            buf += chunk
            while len(buf) >= 2:
                ln = buf[1] & 0x7F; hdr = 2 + (2 if ln == 126 else 8 if ln == 127 else 0)
                if len(buf) < hdr:
                    break
                size = ln if ln < 126 else int.from_bytes(buf[2:hdr], "big")
                if len(buf) < hdr + size:
                    break
                if buf[0] & 0x0F == 0x9:
                    n += 1
                    # Answer it (masked pong, empty).
                    s.sendall(bytes([0x8A, 0x80, 0, 0, 0, 0]))
                buf = buf[hdr + size:]
        s.close()
        print(f"pings: an idle socket heard {n} WebSocket pings in {wait_s} s")
    finally:
        r.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--relay-bin", default="target/release/relay")
    p.add_argument("--only", default="uploads,holds,tickets,pings", help="comma-separated attacks")
    p.add_argument("--ping-wait-s", type=int, default=60)
    a = p.parse_args()
    for name in a.only.split(","):
        if name == "pings":
            pings(a.relay_bin, a.ping_wait_s)
        else:
            globals()[name](a.relay_bin)


if __name__ == "__main__":
    main()
