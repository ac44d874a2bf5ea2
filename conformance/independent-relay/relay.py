#!/usr/bin/env python3
"""An independent SecureChat relay, written from SPEC.md and PROTOCOL.md only (a test asset:
see README.md). Python 3.11 standard library; one process, one asyncio loop, one SQLite file.

    python3 relay.py --listen 127.0.0.1:8080 --data ./data [--test-clock] [--payment-secret S]
"""

import argparse
import asyncio
import base64
import binascii
import hashlib
import hmac
import json
import os
import re
import secrets
import sys
import time
import uuid as uuidlib
from datetime import datetime, timezone

import ed25519_verify
import p256
import wsio
from store import Store

COMMIT_EVERY_S = 2.0
CHALLENGE_TTL_MS = 60_000
POW_TTL_S = 120
TICKET_TTL_MS = 30_000
HOLD_MS = 15 * 60_000
TRADE_ORDER_MS = 30 * 60_000
MESSAGE_TTL_MS = 24 * 3_600_000
MEDIA_TTL_MS = 24 * 3_600_000
FREE_CHANNELS = 3
QUOTA_PRICE = 5
MSGS_PER_MIN = 600
TYPING_PER_MIN = 60
ALIAS_RE = re.compile(r"^[a-z0-9_]{3,32}$")
CALL_TYPES = {"call_offer", "call_answer", "call_ice", "call_reject", "call_hangup", "call_invite"}


class Refusal(Exception):
    """An HTTP error answer: status, code, human detail."""

    def __init__(self, status, code, detail, extra=None):
        super().__init__(detail)
        self.status, self.code, self.detail, self.extra = status, code, detail, extra or {}


def iso(ms):
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def b64_32(text):
    """Standard padded base64 of exactly 32 bytes, else None."""
    if not isinstance(text, str) or not re.fullmatch(r"[A-Za-z0-9+/]*={0,2}", text) or len(text) % 4:
        return None
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error:
        return None
    return raw if len(raw) == 32 else None


def inventory():
    """The vanity aliases for sale: (alias, price, tier, featured)."""
    items = []
    for i, d in enumerate("123456789"):
        items.append((d * 8, 900 - i * 10, "top", True))
    for i in range(40):
        items.append((f"8888{i:04d}", 180 + i, "premium", i < 11))
    for i in range(60):
        items.append((f"lucky{i:03d}", 20 + i, "standard", False))
    return {a: {"alias_id": a, "price_usdt": p, "tier": t, "is_featured": f} for a, p, t, f in items}


class Conn:
    """One authenticated WebSocket."""

    def __init__(self, writer, uuid, token):
        self.writer, self.uuid, self.token = writer, uuid, token
        self.synced = False
        self.open = True

    def send(self, frame):
        if self.open and not self.writer.is_closing():
            self.writer.write(wsio.frame_bytes(1, json.dumps(frame, separators=(",", ":")).encode()))

    def close(self, code=1000):
        if self.open:
            self.open = False
            if not self.writer.is_closing():
                self.writer.write(wsio.frame_bytes(8, code.to_bytes(2, "big")))
                self.writer.close()


class Relay:
    def __init__(self, args):
        self.args = args
        path = os.path.join(args.data, "relay.db") if args.data else None
        if args.data:
            os.makedirs(args.data, exist_ok=True)
        self.plants = set(args.plant or [])
        self.db = Store(path, False)
        # Messages and their seq counters: the same store, or (planted `ack-before-durable`)
        # a file of their own whose writes a background task commits after they were acked.
        if "ack-before-durable" in self.plants:
            self.mdb = Store(path + "-messages" if path else None, True)
        else:
            self.mdb = self.db
        self.offset_ms = 0
        self.secret = (args.payment_secret or os.environ.get("RELAY_PAYMENT_WEBHOOK_SECRET") or "").encode()
        self.vanity = inventory()
        self.vapid = self.db.meta("vapid", lambda: base64.urlsafe_b64encode(p256.keypair()[1]).decode().rstrip("="))
        self.conns = {}  # uuid -> [Conn]
        self.pow = {}  # peer ip -> [(challenge, expires_ms)]
        self.challenges = {}  # challenge -> (uuid, expires_ms)
        self.tickets = {}  # ticket -> (uuid, expires_ms)
        self.uploads = {}  # upload_id -> {owner, key, parts}
        self.media = {}  # key -> (bytes, expires_ms)
        self.windows = {}  # (kind, uuid) -> [ms]

    # ------------------------------------------------------------------ basics

    def now(self):
        return int(time.time() * 1000) + self.offset_ms

    def account(self, uuid):
        return self.db.one("SELECT * FROM accounts WHERE uuid = ?", uuid)

    def by_alias(self, alias):
        return self.db.one("SELECT * FROM accounts WHERE alias = ?", alias)

    def caller(self, req):
        auth = req.header("authorization", "")
        if not auth.startswith("Bearer "):
            raise Refusal(401, "UNAUTHENTICATED", "a bearer token is required")
        uuid = self.token_user(auth[7:].strip())
        if uuid is None:
            raise Refusal(401, "UNAUTHENTICATED", "the token is unknown, expired or revoked")
        return self.account(uuid)

    def token_user(self, token):
        row = self.db.one("SELECT uuid, expires_ms FROM tokens WHERE token = ?", token)
        if row is None or row["expires_ms"] <= self.now():
            return None
        return row["uuid"]

    def limited(self, kind, uuid, per_min):
        now = self.now()
        w = [t for t in self.windows.get((kind, uuid), []) if t > now - 60_000]
        if len(w) >= per_min:
            self.windows[(kind, uuid)] = w
            return True
        w.append(now)
        self.windows[(kind, uuid)] = w
        return False

    def push(self, uuid, frame, keep=False):
        """Sends `frame` to every socket of `uuid`; with `keep`, stores it for the next sync
        when none is open."""
        conns = [c for c in self.conns.get(uuid, []) if c.open]
        for c in conns:
            c.send(frame)
        if keep and not conns:
            self.db.x("INSERT INTO outbox (uuid, frame) VALUES (?, ?)", uuid, json.dumps(frame))

    # ------------------------------------------------------------------ HTTP

    def routes(self):
        return [
            ("POST", r"/api/v1/pow/challenge", self.pow_challenge),
            ("POST", r"/api/v1/register", self.register),
            ("POST", r"/api/v1/auth/challenge", self.auth_challenge),
            ("POST", r"/api/v1/auth/verify", self.auth_verify),
            ("POST", r"/api/v1/ws/ticket", self.ws_ticket),
            ("GET", r"/api/v1/friends", self.friends),
            ("POST", r"/api/v1/friends/request", self.friend_request),
            ("PUT", r"/api/v1/friends/(\d+)/accept", self.friend_accept),
            ("POST", r"/api/v1/friends/(\d+)/reject", self.friend_reject),
            ("GET", r"/api/v1/users/([^/]+)", self.user),
            ("GET", r"/api/v1/conversations/active", self.active),
            ("GET", r"/api/v1/storage/estimate", self.storage),
            ("GET", r"/api/v1/channels/search", self.channel_search),
            ("GET", r"/api/v1/channels/mine", self.channels_mine),
            ("POST", r"/api/v1/channels/quota/buy", self.quota_buy),
            ("POST", r"/api/v1/channels", self.channel_create),
            ("GET", r"/api/v1/channels/([^/]+)", self.channel_detail),
            ("POST", r"/api/v1/channels/([^/]+)/subscribe", self.subscribe),
            ("DELETE", r"/api/v1/channels/([^/]+)/subscribe", self.unsubscribe),
            ("POST", r"/api/v1/channels/([^/]+)/posts", self.post_create),
            ("GET", r"/api/v1/channels/([^/]+)/posts", self.posts),
            ("POST", r"/api/v1/channels/([^/]+)/buy", self.channel_buy),
            ("POST", r"/api/v1/vanity/list-channel", self.list_channel),
            ("GET", r"/api/v1/vanity/search", self.vanity_search),
            ("POST", r"/api/v1/vanity/purchase", self.vanity_purchase),
            ("POST", r"/api/v1/vanity/bind", self.vanity_bind),
            ("POST", r"/api/v1/vanity/reserve", self.vanity_reserve),
            ("GET", r"/api/v1/vanity/order/([^/]+)/status", self.order_status),
            ("POST", r"/api/v1/payments/webhook", self.webhook),
            ("POST", r"/api/v1/media/upload-parts/init", self.media_init),
            ("POST", r"/api/v1/media/upload-parts/([^/]+)/chunk", self.media_chunk),
            ("POST", r"/api/v1/media/upload-parts/([^/]+)/complete", self.media_complete),
            ("GET", r"/api/v1/media/download", self.media_download),
            ("GET", r"/api/v1/push/vapid-key", self.vapid_key),
            ("POST", r"/api/v1/push/subscribe", self.push_ok),
            ("POST", r"/api/v1/push/register", self.push_ok),
            ("POST", r"/api/v1/push/disable", self.push_ok),
            ("GET", r"/api/v1/calls/ice-config", self.ice_config),
            ("POST", r"/api/v1/test/advance-clock", self.advance_clock),
        ]

    def dispatch(self, req):
        """(status, body, content type) of a request."""
        matched_path = False
        for method, pattern, handler in self.compiled:
            m = pattern.fullmatch(req.path)
            if not m:
                continue
            matched_path = True
            if method != req.method:
                continue
            if handler == self.advance_clock and not self.args.test_clock:
                break
            try:
                out = handler(req, *m.groups())
                self.db.durable()
            except Refusal as r:
                self.db.durable()
                return self.http_error(r.status, r.code, r.detail, r.extra)
            except Exception as e:  # a bug of this relay: answer, log, keep serving
                print(f"error: {req.method} {req.path}: {e!r}", file=sys.stderr, flush=True)
                return self.http_error(500, "INTERNAL", "internal error")
            if isinstance(out, tuple):
                return out
            return 200, out, "application/json"
        if matched_path:
            return self.http_error(405, "METHOD_NOT_ALLOWED", f"{req.method} is not served here")
        return self.http_error(404, "NO_ROUTE", f"no route {req.path}")

    def http_error(self, status, code, detail, extra=None):
        """An error response: `{code, detail, ...extra}`; with --text-errors the words alone
        as text/plain, or, when the documents define the body (the repeated registration's
        `{uuid, alias_id}`), that body alone."""
        if self.args.text_errors:
            if extra:
                return status, dict(extra), "application/json"
            return status, detail.encode(), "text/plain; charset=utf-8"
        return status, {"code": code, "detail": detail, **(extra or {})}, "application/json"

    def error_frame(self, code, detail):
        """A WebSocket error frame (with --text-errors: the words only, no code)."""
        if self.args.text_errors:
            return {"type": "error", "detail": detail}
        return {"type": "error", "code": code, "detail": detail}

    def goaway_frame(self, reason):
        """GOAWAY with the reason at top level and in `payload` (with --goaway-top-level: at
        top level only, which every reference client reads)."""
        if self.args.goaway_top_level:
            return {"type": "goaway", "reason": reason}
        return {"type": "goaway", "reason": reason, "payload": {"reason": reason}}

    def body(self, req):
        if not req.body.strip():
            return {}
        try:
            v = json.loads(req.body)
        except (ValueError, UnicodeDecodeError):
            raise Refusal(400, "BAD_JSON", "the body is not JSON")
        if not isinstance(v, dict):
            raise Refusal(400, "BAD_JSON", "the body is not a JSON object")
        return v

    # ------------------------------------------------------------------ registration, auth

    def pow_challenge(self, req):
        challenge = secrets.token_hex(16)
        ip = req.peer
        live = [c for c in self.pow.get(ip, []) if c[1] > self.now()][-255:]
        live.append((challenge, self.now() + POW_TTL_S * 1000))
        self.pow[ip] = live
        return {"challenge_string": challenge, "difficulty": self.args.pow_difficulty, "expires_in": POW_TTL_S}

    def register(self, req):
        b = self.body(req)
        ed, x, nick = b64_32(b.get("ed25519_public_key")), b64_32(b.get("x25519_public_key")), b.get("nickname")
        if ed is None or x is None or not ed25519_verify.is_point(ed):
            raise Refusal(400, "BAD_KEY", "public keys must be padded base64 of 32 bytes")
        if not isinstance(nick, str) or not nick or len(nick) > 64:
            raise Refusal(400, "BAD_NICKNAME", "nickname must be a non-empty string")
        existing = self.db.one("SELECT uuid, alias FROM accounts WHERE ed_key = ?", b["ed25519_public_key"])
        if existing:
            raise Refusal(409, "ALREADY_REGISTERED", "this key is registered",
                          {"uuid": existing["uuid"], "alias_id": existing["alias"]})
        if self.args.pow_difficulty > 0:
            nonce = b.get("pow_nonce")
            if not isinstance(nonce, str) or not nonce:
                raise Refusal(400, "POW_REQUIRED", "solve /api/v1/pow/challenge first")
            live = [c for c in self.pow.get(req.peer, []) if c[1] > self.now()]
            want = "0" * self.args.pow_difficulty
            solved = next((c for c in live if hashlib.sha256((c[0] + nonce).encode()).hexdigest().startswith(want)), None)
            if solved is None:
                raise Refusal(400, "POW_INVALID", "the nonce solves no open challenge of this address")
            self.pow[req.peer] = [c for c in live if c != solved]
        uuid = str(uuidlib.uuid4())
        while True:
            alias = "x" + "".join(secrets.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(9))
            if not self.by_alias(alias) and alias not in self.vanity:
                break
        self.db.x("INSERT INTO accounts (uuid, alias, ed_key, x_key, nickname, created_ms) VALUES (?,?,?,?,?,?)",
                  uuid, alias, b["ed25519_public_key"], b["x25519_public_key"], nick, self.now())
        return 201, {"uuid": uuid, "alias_id": alias}, "application/json"

    def auth_challenge(self, req):
        b = self.body(req)
        uuid = b.get("user_uuid")
        if not isinstance(uuid, str) or self.account(uuid.lower()) is None:
            raise Refusal(404, "NO_ACCOUNT", "no such account")
        challenge = "login:" + secrets.token_urlsafe(24)
        exp = self.now() + CHALLENGE_TTL_MS
        self.challenges[challenge] = (uuid.lower(), exp)
        return {"challenge": challenge, "expires_at": iso(exp)}

    def auth_verify(self, req):
        b = self.body(req)
        uuid, challenge, sig = b.get("user_uuid"), b.get("challenge"), b.get("signature")
        held = self.challenges.get(challenge) if isinstance(challenge, str) else None
        if not isinstance(uuid, str) or held is None or held[0] != uuid.lower() or held[1] <= self.now():
            raise Refusal(401, "BAD_CHALLENGE", "unknown, used or expired challenge")
        acct = self.account(uuid.lower())
        try:
            raw_sig = base64.b64decode(sig, validate=True) if isinstance(sig, str) else b""
        except binascii.Error:
            raw_sig = b""
        if not ed25519_verify.verify(base64.b64decode(acct["ed_key"]), challenge.encode(), raw_sig):
            raise Refusal(401, "BAD_SIGNATURE", "the signature does not verify")
        del self.challenges[challenge]
        old = [r["token"] for r in self.db.q("SELECT token FROM tokens WHERE uuid = ?", acct["uuid"])]
        self.db.x("DELETE FROM tokens WHERE uuid = ?", acct["uuid"])
        token = "t." + secrets.token_urlsafe(32)
        self.db.x("INSERT INTO tokens (token, uuid, expires_ms) VALUES (?,?,?)",
                  token, acct["uuid"], self.now() + self.args.token_lifetime_s * 1000)
        for c in list(self.conns.get(acct["uuid"], [])):
            if c.token in old:
                c.send(self.goaway_frame("new_device_login"))
                c.close()
        return {"token": token, "expires_in": self.args.token_lifetime_s}

    def ws_ticket(self, req):
        acct = self.caller(req)
        ticket = secrets.token_urlsafe(24)
        self.tickets[ticket] = (acct["uuid"], self.now() + TICKET_TTL_MS,
                                req.header("authorization")[7:].strip())
        return {"ticket": ticket}

    # ------------------------------------------------------------------ contacts

    def friendship_json(self, f, me):
        other_uuid = f["recipient"] if f["requester"] == me else f["requester"]
        other = self.account(other_uuid)
        return {
            "friendship_id": f["id"], "alias_id": other["alias"], "nickname": other["nickname"],
            "status": f["status"], "direction": "sent" if f["requester"] == me else "received",
            "conversation_id": f["conv_id"] or "", "x25519_public_key": other["x_key"],
            "ed25519_public_key": other["ed_key"], "created_at": iso(f["created_ms"]),
        }

    def friends(self, req):
        me = self.caller(req)["uuid"]
        rows = self.db.q("SELECT * FROM friendships WHERE requester = ? OR recipient = ? ORDER BY id", me, me)
        return 200, [self.friendship_json(f, me) for f in rows], "application/json"

    def friend_request(self, req):
        me = self.caller(req)
        to = self.body(req).get("to_alias_id")
        other = self.by_alias(to) if isinstance(to, str) else None
        if other is None:
            raise Refusal(404, "NO_SUCH_ALIAS", "no account has this alias")
        if other["uuid"] == me["uuid"]:
            raise Refusal(400, "SELF_REQUEST", "you cannot befriend yourself")
        exists = self.db.one(
            "SELECT id FROM friendships WHERE (requester = ? AND recipient = ?) OR (requester = ? AND recipient = ?)",
            me["uuid"], other["uuid"], other["uuid"], me["uuid"])
        if exists:
            raise Refusal(409, "DUPLICATE", "friend request already exists")
        first = self.db.one("SELECT MAX(id) AS m FROM friendships")["m"]
        fid = (first or 999) + 1
        self.db.x("INSERT INTO friendships (id, requester, recipient, status, created_ms) VALUES (?,?,?,?,?)",
                  fid, me["uuid"], other["uuid"], "pending", self.now())
        self.db.durable()
        self.push(other["uuid"], {"type": "friend_request", "friendship_id": fid})
        return {"friendship_id": fid}

    def friend_row(self, fid, me):
        f = self.db.one("SELECT * FROM friendships WHERE id = ?", int(fid))
        if f is None or me not in (f["requester"], f["recipient"]):
            raise Refusal(404, "NO_FRIENDSHIP", "no such friendship")
        if f["recipient"] != me:
            raise Refusal(403, "NOT_RECIPIENT", "only the recipient answers a request")
        return f

    def friend_accept(self, req, fid):
        me = self.caller(req)["uuid"]
        f = self.friend_row(fid, me)
        if f["status"] == "accepted":
            return {"conversation_id": f["conv_id"]}
        if f["status"] != "pending":
            raise Refusal(409, "NOT_PENDING", "this request was already answered")
        conv = "dm_" + secrets.token_hex(8)
        self.db.x("UPDATE friendships SET status = 'accepted', conv_id = ? WHERE id = ?", conv, f["id"])
        self.db.durable()
        self.push(f["requester"], {"type": "friend_accepted", "friendship_id": f["id"], "conversation_id": conv})
        return {"conversation_id": conv}

    def friend_reject(self, req, fid):
        me = self.caller(req)["uuid"]
        f = self.friend_row(fid, me)
        if f["status"] == "pending":
            self.db.x("UPDATE friendships SET status = 'rejected' WHERE id = ?", f["id"])
        return {}

    def user(self, req, alias):
        self.caller(req)
        a = self.by_alias(alias)
        if a is None:
            raise Refusal(404, "NO_SUCH_ALIAS", "no account has this alias")
        return {"alias_id": a["alias"], "nickname": a["nickname"], "x25519_public_key": a["x_key"],
                "ed25519_public_key": a["ed_key"]}

    def conv(self, conv_id, me):
        """The accepted friendship whose conversation is `conv_id`, with `me` in it."""
        f = self.db.one("SELECT * FROM friendships WHERE conv_id = ? AND status = 'accepted'", conv_id)
        if f is None or me not in (f["requester"], f["recipient"]):
            return None
        return f

    def peer(self, f, me):
        return f["recipient"] if f["requester"] == me else f["requester"]

    def active(self, req):
        me = self.caller(req)["uuid"]
        rows = self.db.q("SELECT conv_id FROM friendships WHERE status = 'accepted' AND (requester = ? OR recipient = ?)", me, me)
        return {"conversations": [{"conv_id": r["conv_id"]} for r in rows]}

    def storage(self, req):
        me = self.caller(req)["uuid"]
        row = self.mdb.one("SELECT COUNT(*) AS n, COALESCE(SUM(LENGTH(payload)), 0) AS b FROM messages WHERE recipient = ? AND pending = 1", me)
        return {"used_bytes": row["b"], "quota_bytes": 100 * 1024 * 1024, "message_count": row["n"]}

    # ------------------------------------------------------------------ channels

    def channel(self, cid):
        c = self.db.one("SELECT * FROM channels WHERE id = ?", cid)
        if c is None:
            raise Refusal(404, "NO_CHANNEL", "no such channel")
        return c

    def channel_json(self, c, me):
        sub = self.db.one("SELECT 1 FROM subscriptions WHERE channel_id = ? AND uuid = ?", c["id"], me)
        out = {"id": c["id"], "name": c["name"], "description": c["description"],
               "role": "owner" if c["owner"] == me else ("subscriber" if sub else None),
               "is_subscribed": bool(sub), "for_sale": c["sale_price"] is not None}
        if out["role"] is None:
            del out["role"]
        if c["sale_price"] is not None:
            out["sale_price"] = c["sale_price"]
        return out

    def channel_create(self, req):
        me = self.caller(req)
        b = self.body(req)
        name, desc = b.get("name"), b.get("description", "")
        if not isinstance(name, str) or not name.strip() or not isinstance(desc, str):
            raise Refusal(400, "BAD_CHANNEL", "name and description are strings")
        owned = self.db.one("SELECT COUNT(*) AS n FROM channels WHERE owner = ?", me["uuid"])["n"]
        if owned >= FREE_CHANNELS + me["extra_seats"]:
            raise Refusal(403, "QUOTA_EXCEEDED", "QUOTA_EXCEEDED: buy a seat at /api/v1/channels/quota/buy")
        cid = "chan-" + secrets.token_hex(6)
        self.db.x("INSERT INTO channels (id, owner, name, description, is_public, created_ms) VALUES (?,?,?,?,?,?)",
                  cid, me["uuid"], name, desc, 0 if b.get("is_public") is False else 1, self.now())
        return {"channel_id": cid}

    def channel_detail(self, req, cid):
        me = self.caller(req)["uuid"]
        return self.channel_json(self.channel(cid), me)

    def channels_mine(self, req):
        me = self.caller(req)["uuid"]
        rows = self.db.q("SELECT * FROM channels WHERE owner = ? OR id IN (SELECT channel_id FROM subscriptions WHERE uuid = ?) ORDER BY created_ms", me, me)
        return 200, [self.channel_json(c, me) for c in rows], "application/json"

    def channel_search(self, req):
        me = self.caller(req)["uuid"]
        q = req.query.get("q", "").strip().lower()
        if not q:
            return 200, [], "application/json"
        rows = self.db.q("SELECT * FROM channels WHERE is_public = 1 ORDER BY created_ms")
        return 200, [self.channel_json(c, me) for c in rows if q in c["name"].lower()], "application/json"

    def subscribe(self, req, cid):
        me = self.caller(req)["uuid"]
        self.channel(cid)
        self.db.x("INSERT OR IGNORE INTO subscriptions (channel_id, uuid) VALUES (?, ?)", cid, me)
        return {}

    def unsubscribe(self, req, cid):
        me = self.caller(req)["uuid"]
        self.channel(cid)
        self.db.x("DELETE FROM subscriptions WHERE channel_id = ? AND uuid = ?", cid, me)
        return {}

    def post_json(self, p):
        return {"id": p["id"], "type": p["type"], "content": p["content"],
                "created_at": iso(p["created_ms"]), "author_alias_id": self.account(p["author"])["alias"]}

    def post_create(self, req, cid):
        me = self.caller(req)
        c = self.channel(cid)
        if c["owner"] != me["uuid"] and not self.args.anyone_posts:
            raise Refusal(403, "NOT_OWNER", "only the channel's owner posts")
        b = self.body(req)
        kind, content = b.get("type", "text"), b.get("content")
        if kind not in ("text", "markdown") or not isinstance(content, str):
            raise Refusal(400, "BAD_POST", "type text|markdown and a string content")
        n = self.db.one("SELECT COUNT(*) AS n FROM posts")["n"]
        pid = "post-" + secrets.token_hex(6)
        self.db.x("INSERT INTO posts (id, channel_id, type, content, author, created_ms, n) VALUES (?,?,?,?,?,?,?)",
                  pid, cid, kind, content, me["uuid"], self.now(), n)
        self.db.durable()
        post = self.post_json(self.db.one("SELECT * FROM posts WHERE id = ?", pid))
        for s in self.db.q("SELECT uuid FROM subscriptions WHERE channel_id = ?", cid):
            self.push(s["uuid"], {"type": "channel_post", "conv_id": cid, "post": post})
        return {"post_id": pid}

    def posts(self, req, cid):
        self.caller(req)
        self.channel(cid)
        rows = self.db.q("SELECT * FROM posts WHERE channel_id = ? ORDER BY n DESC", cid)
        return 200, [self.post_json(p) for p in rows], "application/json"

    def list_channel(self, req):
        me = self.caller(req)
        b = self.body(req)
        c = self.channel(b.get("channel_id") if isinstance(b.get("channel_id"), str) else "")
        if c["owner"] != me["uuid"]:
            raise Refusal(403, "NOT_OWNER", "only the owner lists a channel")
        price = b.get("price_usdt")
        if not isinstance(price, int) or isinstance(price, bool) or price <= 0:
            raise Refusal(400, "BAD_PRICE", "price_usdt is a positive whole number of USDT")
        self.db.x("UPDATE channels SET sale_price = ? WHERE id = ?", price, c["id"])
        return {}

    def open_order(self, kind, ref_id):
        """The pending, unexpired order for `ref_id` of `kind`, if any."""
        self.expire_orders()
        return self.db.one("SELECT * FROM orders WHERE kind = ? AND ref_id = ? AND status = 'pending'", kind, ref_id)

    def new_order(self, kind, buyer, ref_id, price, ttl_ms):
        oid = "ord_" + secrets.token_hex(10)
        exp = self.now() + ttl_ms
        self.db.x("INSERT INTO orders (id, kind, buyer, ref_id, price, status, expires_ms, created_ms) VALUES (?,?,?,?,?,?,?,?)",
                  oid, kind, buyer, ref_id, price, "pending", exp, self.now())
        return oid, exp

    def channel_buy(self, req, cid):
        me = self.caller(req)
        c = self.channel(cid)
        if c["owner"] == me["uuid"]:
            raise Refusal(400, "OWN_CHANNEL", "you own this channel")
        if c["sale_price"] is None:
            raise Refusal(409, "NOT_FOR_SALE", "this channel is not for sale")
        if self.open_order("channel", cid):
            raise Refusal(409, "SOLD", "this channel was just bought by someone else")
        oid, exp = self.new_order("channel", me["uuid"], cid, c["sale_price"], TRADE_ORDER_MS)
        return {"order_id": oid, "price_usdt": c["sale_price"], "pay_to": "TXindependentRelayPayTo0000000000", "expired_at": iso(exp)}

    def quota_buy(self, req):
        me = self.caller(req)
        oid, exp = self.new_order("quota", me["uuid"], me["uuid"], QUOTA_PRICE, TRADE_ORDER_MS)
        return {"order_id": oid, "price_usdt": QUOTA_PRICE, "pay_to": "TXindependentRelayPayTo0000000000", "expired_at": iso(exp)}

    # ------------------------------------------------------------------ vanity, payments

    def expire_orders(self):
        self.db.x("UPDATE orders SET status = 'expired' WHERE status = 'pending' AND expires_ms <= ?", self.now())

    def alias_taken(self, alias):
        self.expire_orders()
        if self.by_alias(alias):
            return True
        return self.db.one("SELECT 1 FROM orders WHERE kind IN ('vanity', 'reserve') AND ref_id = ? AND status IN ('pending', 'confirmed')", alias) is not None

    def vanity_search(self, req):
        q = req.query.get("q", "")
        if q:
            items = [v for a, v in self.vanity.items() if a.startswith(q) and not self.alias_taken(a)]
        else:
            items = [v for a, v in self.vanity.items() if v["is_featured"] and not self.alias_taken(a)]
        items.sort(key=lambda v: (v["price_usdt"], v["alias_id"]))
        return 200, items[:50], "application/json"

    def vanity_order(self, req, kind, buyer):
        alias = self.body(req).get("alias_id")
        if not isinstance(alias, str) or alias not in self.vanity:
            raise Refusal(404, "NO_SUCH_ALIAS", "this alias is not for sale")
        if self.alias_taken(alias):
            raise Refusal(409, "ALIAS_HELD", "this alias is held or sold")
        price = self.vanity[alias]["price_usdt"]
        oid, exp = self.new_order(kind, buyer, alias, price, HOLD_MS)
        return oid, alias, price, exp

    def vanity_purchase(self, req):
        me = self.caller(req)
        oid, alias, price, exp = self.vanity_order(req, "vanity", me["uuid"])
        return {"order_id": oid, "alias_id": alias, "price_usdt": price,
                "payment_url": f"https://pay.invalid/{oid}", "expired_at": iso(exp)}

    def vanity_reserve(self, req):
        oid, alias, price, exp = self.vanity_order(req, "reserve", None)
        return {"order_id": oid, "alias_id": alias, "price_usdt": price,
                "pay_to": "TXindependentRelayPayTo0000000000", "expired_at": iso(exp)}

    def order_status(self, req, oid):
        self.expire_orders()
        o = self.db.one("SELECT * FROM orders WHERE id = ?", oid)
        if o is None:
            raise Refusal(404, "NO_ORDER", "no such order")
        alias = o["ref_id"] if o["kind"] in ("vanity", "reserve") else ""
        return {"status": o["status"], "alias_id": alias}

    def vanity_bind(self, req):
        me = self.caller(req)
        oid = self.body(req).get("order_id")
        o = self.db.one("SELECT * FROM orders WHERE id = ? AND kind = 'vanity'", oid) if isinstance(oid, str) else None
        if o is None or o["buyer"] != me["uuid"]:
            raise Refusal(404, "NO_ORDER", "no such order of yours")
        if o["status"] != "confirmed":
            raise Refusal(409, "NOT_CONFIRMED", "the order is not paid")
        if o["bound"]:
            return {"alias_id": o["ref_id"]}
        holder = self.by_alias(o["ref_id"])
        if holder and holder["uuid"] != me["uuid"]:
            raise Refusal(409, "ALIAS_CONFLICT", "the alias belongs to another account")
        self.db.x("UPDATE accounts SET alias = ? WHERE uuid = ?", o["ref_id"], me["uuid"])
        self.db.x("UPDATE orders SET bound = 1 WHERE id = ?", oid)
        return {"alias_id": o["ref_id"]}

    def webhook(self, req):
        sig = req.header("x-payment-signature", "")
        want = hmac.new(self.secret, req.body, hashlib.sha256).hexdigest()
        if not self.secret or not hmac.compare_digest(sig.lower(), want):
            raise Refusal(401, "BAD_SIGNATURE", "the webhook signature does not verify")
        b = self.body(req)
        pid, oid = str(b.get("payment_id", "")), b.get("order_id")
        o = self.db.one("SELECT * FROM orders WHERE id = ?", oid) if isinstance(oid, str) else None
        if o is None:
            raise Refusal(404, "NO_ORDER", "no such order")
        if self.db.one("SELECT 1 FROM payments WHERE payment_id = ?", pid):
            return {"status": o["status"]}
        self.db.x("INSERT INTO payments (payment_id, order_id) VALUES (?, ?)", pid, oid)
        paid = b.get("paid_usdt")
        self.expire_orders()
        o = self.db.one("SELECT * FROM orders WHERE id = ?", oid)
        full = isinstance(paid, (int, float)) and paid >= o["price"]
        if b.get("payment_status") != "finished" or not full or o["status"] != "pending":
            return {"status": o["status"]}
        self.db.x("UPDATE orders SET status = 'confirmed' WHERE id = ?", oid)
        if o["kind"] == "channel":
            self.db.x("UPDATE channels SET owner = ?, sale_price = NULL WHERE id = ?", o["buyer"], o["ref_id"])
            self.db.x("DELETE FROM subscriptions WHERE channel_id = ? AND uuid = ?", o["ref_id"], o["buyer"])
        elif o["kind"] == "quota":
            self.db.x("UPDATE accounts SET extra_seats = extra_seats + 1 WHERE uuid = ?", o["buyer"])
        self.db.durable()
        if o["buyer"]:
            self.push(o["buyer"], {"type": "payment_confirmed", "order_id": oid, "ref_id": o["ref_id"]}, keep=True)
        return {"status": "confirmed"}

    # ------------------------------------------------------------------ media, push, calls

    def media_init(self, req):
        me = self.caller(req)
        uid = "up_" + secrets.token_hex(8)
        key = "m/" + secrets.token_hex(12)
        self.uploads[uid] = {"owner": me["uuid"], "key": key, "parts": {}}
        return {"upload_id": uid, "media_key": key}

    def media_chunk(self, req, uid):
        me = self.caller(req)
        up = self.uploads.get(uid)
        if up is None:
            raise Refusal(404, "NO_UPLOAD", "no such upload")
        if up["owner"] != me["uuid"]:
            raise Refusal(403, "NOT_YOURS", "another account's upload")
        try:
            n = int(req.query.get("partNumber", ""))
        except ValueError:
            raise Refusal(400, "BAD_PART", "partNumber is a number from 1")
        if n < 1 or req.query.get("mediaKey") != up["key"]:
            raise Refusal(400, "BAD_PART", "partNumber from 1 and the upload's mediaKey")
        etag = hashlib.md5(req.body).hexdigest()
        up["parts"][n] = (etag, req.body)
        return {"etag": f'"{etag}"'}

    def media_complete(self, req, uid):
        me = self.caller(req)
        up = self.uploads.get(uid)
        if up is None or up["owner"] != me["uuid"]:
            raise Refusal(404, "NO_UPLOAD", "no such upload of yours")
        parts = self.body(req).get("parts")
        if not isinstance(parts, list) or not parts:
            raise Refusal(400, "BAD_PARTS", "parts is a non-empty list")
        data = []
        for p in sorted(parts, key=lambda p: p.get("part_number", 0) if isinstance(p, dict) else 0):
            held = up["parts"].get(p.get("part_number")) if isinstance(p, dict) else None
            if held is None or str(p.get("etag", "")).strip('"') != held[0]:
                raise Refusal(400, "BAD_ETAG", "a part's etag is not the one issued")
            data.append(held[1])
        self.media[up["key"]] = (b"".join(data), self.now() + MEDIA_TTL_MS)
        del self.uploads[uid]
        return {}

    def media_download(self, req):
        self.caller(req)
        held = self.media.get(req.query.get("key", ""))
        if held is None or held[1] <= self.now():
            raise Refusal(404, "NO_MEDIA", "no such media")
        return 200, held[0], "application/octet-stream"

    def vapid_key(self, req):
        return {"vapid_public_key": self.vapid}

    def push_ok(self, req):
        self.caller(req)
        self.body(req)
        return {}

    def ice_config(self, req):
        self.caller(req)
        relay = req.query.get("mode") == "relay"
        return {"ttl": 600, "ice_transport_policy": "relay" if relay else "all",
                "ice_servers": [{"urls": ["stun:stun.invalid:3478"]}]}

    def advance_clock(self, req):
        ms = self.body(req).get("ms")
        if not isinstance(ms, int) or ms < 0:
            raise Refusal(400, "BAD_MS", "ms is a non-negative integer")
        self.offset_ms += ms
        return {"now_ms": self.now()}

    # ------------------------------------------------------------------ WebSocket

    def ws_auth(self, req):
        q = req.query
        uuid = (q.get("user_uuid") or "").lower()
        if "ticket" in q:
            held = self.tickets.pop(q["ticket"], None)
            if held and held[0] == uuid and held[1] > self.now() and self.token_user(held[2]) == uuid:
                return uuid, held[2]
            return None
        if "token" in q and self.token_user(q["token"]) == uuid and uuid:
            return uuid, q["token"]
        return None

    def on_open(self, conn):
        for c in list(self.conns.get(conn.uuid, [])):
            if c.token == conn.token:
                c.close()
        self.conns.setdefault(conn.uuid, [])
        self.conns[conn.uuid] = [c for c in self.conns[conn.uuid] if c.open] + [conn]

    def on_close(self, conn):
        conn.open = False
        self.conns[conn.uuid] = [c for c in self.conns.get(conn.uuid, []) if c is not conn]

    def alias_of(self, uuid):
        return self.account(uuid)["alias"]

    def on_text(self, conn, text):
        try:
            f = json.loads(text)
        except ValueError:
            self.refuse(conn, "BAD_JSON", "a frame is one JSON object", {})
            return
        if not isinstance(f, dict):
            self.refuse(conn, "BAD_JSON", "a frame is one JSON object", {})
            return
        if self.token_user(conn.token) != conn.uuid:
            conn.send(self.goaway_frame("jwt_revoked"))
            conn.close()
            return
        kind = f.get("type")
        handler = {"sync": self.ws_sync, "msg": self.ws_msg, "delivered": self.ws_receipt,
                   "read": self.ws_receipt, "typing": self.ws_typing, "retract": self.ws_retract}.get(kind)
        try:
            if handler:
                handler(conn, f)
            elif kind in CALL_TYPES:
                self.ws_call(conn, f)
        except Exception as e:  # a bug of this relay: answer, log, keep the socket
            print(f"error: frame {kind!r}: {e!r}", file=sys.stderr, flush=True)
            conn.send(self.error_frame("INTERNAL", "internal error"))
        self.db.durable()
        self.mdb.durable()

    def refuse(self, conn, code, detail, f):
        """Refuses frame `f`: an error frame naming its id (with --silent-refusals: nothing)."""
        if self.args.silent_refusals:
            return
        frame = self.error_frame(code, detail)
        if isinstance(f.get("id"), str):
            frame["id"] = f["id"]
        conn.send(frame)

    def msg_frame(self, m):
        frame = {"type": "msg", "id": m["id"], "from": self.alias_of(m["sender"]), "conv_id": m["conv_id"],
                 "seq": m["seq"], "at": m["at_ms"], "payload": m["payload"]}
        if m["crypto_v"] is not None:
            frame["crypto_v"] = m["crypto_v"]
        return frame

    def ws_sync(self, conn, f):
        conn.synced = True
        self.mdb.x("DELETE FROM messages WHERE pending = 1 AND at_ms < ?", self.now() - MESSAGE_TTL_MS)
        for m in self.mdb.q("SELECT * FROM messages WHERE recipient = ? AND pending = 1 ORDER BY conv_id, seq", conn.uuid):
            conn.send(self.msg_frame(m))
        rows = self.db.q("SELECT n, frame FROM outbox WHERE uuid = ? ORDER BY n", conn.uuid)
        for r in rows:
            conn.send(json.loads(r["frame"]))
        self.db.x("DELETE FROM outbox WHERE uuid = ?", conn.uuid)

    def ws_msg(self, conn, f):
        mid, to, conv_id, payload = f.get("id"), f.get("to"), f.get("conv_id"), f.get("payload")
        if not all(isinstance(v, str) and v for v in (mid, to, conv_id, payload)):
            return self.refuse(conn, "BAD_MSG", "msg needs id, to, conv_id and payload", f)
        if len(payload.encode()) > self.args.max_payload_bytes:
            return self.refuse(conn, "PAYLOAD_TOO_LARGE", f"payload above {self.args.max_payload_bytes} bytes", f)
        fr = self.conv(conv_id, conn.uuid)
        if fr is None and "rejected-can-message" in self.plants:
            # PLANTED BUG: any friendship row between the two, whatever its status (pending,
            # rejected), lets the requester write, in whatever conversation id it names.
            other = self.by_alias(to)
            fr = other and self.db.one(
                "SELECT * FROM friendships WHERE (requester = ? AND recipient = ?) OR (requester = ? AND recipient = ?)",
                conn.uuid, other["uuid"], other["uuid"], conn.uuid)
        if fr is None or self.alias_of(self.peer(fr, conn.uuid)) != to:
            return self.refuse(conn, "NOT_A_MEMBER", "no accepted conversation with this recipient", f)
        if "no-dedup" not in self.plants:
            same = self.mdb.one("SELECT seq FROM messages WHERE conv_id = ? AND id = ?", conv_id, mid)
            if same:
                conn.send({"type": "ack", "id": mid, "seq": same["seq"]})
                return
        if self.limited("msg", conn.uuid, self.args.msgs_per_min):
            return self.refuse(conn, "RATE_LIMITED", f"more than {self.args.msgs_per_min} messages a minute", f)
        row = self.mdb.one("SELECT last_seq FROM counters WHERE conv_id = ?", conv_id)
        seq = (row["last_seq"] if row else 0) + 1
        self.mdb.x("INSERT OR REPLACE INTO counters (conv_id, last_seq) VALUES (?, ?)", conv_id, seq)
        recipient = self.peer(fr, conn.uuid)
        cv = f.get("crypto_v") if isinstance(f.get("crypto_v"), int) else None
        self.mdb.x("INSERT INTO messages (conv_id, seq, id, sender, recipient, payload, crypto_v, at_ms, pending) VALUES (?,?,?,?,?,?,?,?,1)",
                  conv_id, seq, mid, conn.uuid, recipient, payload, cv, self.now())
        self.mdb.durable()
        conn.send({"type": "ack", "id": mid, "seq": seq})
        if "invent-delivered" in self.plants:
            # PLANTED BUG: the sender is told its message was delivered as soon as it is stored.
            conn.send({"type": "delivered", "conv_id": conv_id, "seq": seq, "from": self.alias_of(recipient)})
        m = self.mdb.one("SELECT * FROM messages WHERE conv_id = ? AND seq = ?", conv_id, seq)
        for c in self.conns.get(recipient, []):
            if c.open and c.synced:
                c.send(self.msg_frame(m))

    def ws_receipt(self, conn, f):
        seq, conv_id, to = f.get("seq"), f.get("conv_id"), f.get("to")
        if not isinstance(seq, int) or isinstance(seq, bool):
            return self.refuse(conn, "BAD_RECEIPT", "a receipt carries the seq it covers", f)
        fr = self.conv(conv_id, conn.uuid) if isinstance(conv_id, str) else None
        if fr is None:
            return
        other = self.peer(fr, conn.uuid)
        if to is not None and self.alias_of(other) != to:
            return
        if f["type"] == "delivered":
            self.mdb.x("UPDATE messages SET pending = 0 WHERE conv_id = ? AND recipient = ? AND seq <= ?", conv_id, conn.uuid, seq)
        if f["type"] == "read" and "read-newest" in self.plants:
            # PLANTED BUG: the sender is told the newest message was read, whatever was.
            row = self.mdb.one("SELECT MAX(seq) AS s FROM messages WHERE conv_id = ?", conv_id)
            seq = max(seq, row["s"] or 0) if row else seq
        keep = not (f["type"] == "delivered" and "drop-offline-delivered" in self.plants)
        # (PLANTED BUG drop-offline-delivered: a `delivered` for an offline sender is dropped.)
        self.push(other, {"type": f["type"], "conv_id": conv_id, "seq": seq, "from": self.alias_of(conn.uuid)}, keep=keep)

    def ws_typing(self, conn, f):
        conv_id = f.get("conv_id")
        fr = self.conv(conv_id, conn.uuid) if isinstance(conv_id, str) else None
        if fr is None or self.limited("typing", conn.uuid, TYPING_PER_MIN):
            return
        self.push(self.peer(fr, conn.uuid), {"type": "typing", "from": self.alias_of(conn.uuid), "conv_id": conv_id})

    def ws_retract(self, conn, f):
        mid, conv_id = f.get("id"), f.get("conv_id")
        fr = self.conv(conv_id, conn.uuid) if isinstance(conv_id, str) else None
        m = self.mdb.one("SELECT * FROM messages WHERE conv_id = ? AND id = ?", conv_id, mid) if fr else None
        if m is None:
            return self.refuse(conn, "UNKNOWN_MESSAGE", "no such message in this conversation", f)
        if m["sender"] != conn.uuid:
            return self.refuse(conn, "NOT_AUTHOR", "only the author retracts a message", f)
        self.mdb.x("UPDATE messages SET pending = 0 WHERE conv_id = ? AND id = ?", conv_id, mid)
        self.push(self.peer(fr, conn.uuid), {"type": "retract", "id": mid, "from": self.alias_of(conn.uuid), "conv_id": conv_id}, keep=True)

    def ws_call(self, conn, f):
        call_id, to = f.get("call_id"), f.get("to")
        if not isinstance(call_id, str) or not call_id:
            return self.refuse(conn, "NO_CALL_ID", "a call signal carries its call_id", f)
        other = self.by_alias(to) if isinstance(to, str) else None
        if other is None or not self.db.one(
                "SELECT 1 FROM friendships WHERE status = 'accepted' AND ((requester = ? AND recipient = ?) OR (requester = ? AND recipient = ?))",
                conn.uuid, other["uuid"], other["uuid"], conn.uuid):
            return self.refuse(conn, "NOT_A_CONTACT", "calls are between contacts", f)
        out = dict(f)
        out["from"] = self.alias_of(conn.uuid)
        self.push(other["uuid"], out)

    # ------------------------------------------------------------------ connections

    async def serve(self, reader, writer):
        peer = (writer.get_extra_info("peername") or ("?", 0))[0]
        try:
            while True:
                try:
                    req = await wsio.read_request(reader, peer, self.args.max_body_bytes)
                except (wsio.BadRequest, ValueError):
                    writer.write(wsio.response_bytes(*self.http_error(400, "BAD_HTTP", "not HTTP/1.1")))
                    break
                if req is None:
                    break
                if isinstance(req, tuple):
                    writer.write(wsio.response_bytes(*self.http_error(
                        413, "BODY_TOO_LARGE", f"bodies up to {self.args.max_body_bytes} bytes")))
                    await writer.drain()
                    continue
                if req.path == "/ws" and req.header("upgrade", "").lower() == "websocket":
                    await self.websocket(req, reader, writer)
                    break
                if req.method == "OPTIONS":
                    writer.write(wsio.response_bytes(204))
                else:
                    status, body, ctype = self.dispatch(req)
                    writer.write(wsio.response_bytes(status, body, ctype))
                await writer.drain()
                if req.header("connection", "").lower() == "close":
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            if not writer.is_closing():
                writer.close()

    async def websocket(self, req, reader, writer):
        who = self.ws_auth(req)
        key = req.header("sec-websocket-key")
        if who is None or not key:
            writer.write(wsio.response_bytes(*self.http_error(
                401, "UNAUTHENTICATED", "a valid ticket or token and its user_uuid")))
            await writer.drain()
            return
        writer.write(wsio.upgrade_bytes(key))
        conn = Conn(writer, *who)
        self.on_open(conn)
        try:
            while conn.open:
                try:
                    got = await wsio.read_message(reader, self.args.max_frame_bytes)
                except wsio.FrameTooLarge:
                    conn.send(self.error_frame("FRAME_TOO_LARGE", f"frames up to {self.args.max_frame_bytes} bytes"))
                    conn.close(1009)
                    break
                if got is None:
                    break
                opcode, data = got
                if opcode == 8:
                    conn.close()
                    break
                if opcode == 9:
                    writer.write(wsio.frame_bytes(10, data))
                elif opcode == 1:
                    self.on_text(conn, data.decode("utf-8", "replace"))
                elif opcode == 2:
                    self.on_text(conn, data.decode("utf-8", "replace"))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.on_close(conn)


async def committer(relay):
    while True:
        await asyncio.sleep(COMMIT_EVERY_S)
        relay.mdb.flush()


async def main(args):
    relay = Relay(args)
    relay.compiled = [(m, re.compile(p), h) for m, p, h in relay.routes()]
    host, _, port = args.listen.rpartition(":")
    server = await asyncio.start_server(relay.serve, host or "127.0.0.1", int(port))
    if "ack-before-durable" in relay.plants:
        asyncio.get_running_loop().create_task(committer(relay))
    print(f"independent relay listening on {args.listen}", flush=True)
    async with server:
        await server.serve_forever()


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", default="127.0.0.1:8080", help="HOST:PORT to serve HTTP and /ws on")
    p.add_argument("--data", help="directory of the SQLite store (default: memory only)")
    p.add_argument("--pow-difficulty", type=int, default=1, help="leading zero hex digits of the proof of work (0: none)")
    p.add_argument("--payment-secret", help="payment webhook HMAC secret (default: $RELAY_PAYMENT_WEBHOOK_SECRET)")
    p.add_argument("--test-clock", action="store_true", help="serve POST /api/v1/test/advance-clock (tests only)")
    p.add_argument("--token-lifetime-s", type=int, default=3600)
    p.add_argument("--max-frame-bytes", type=int, default=256 * 1024)
    p.add_argument("--max-payload-bytes", type=int, default=128 * 1024)
    p.add_argument("--max-body-bytes", type=int, default=1024 * 1024)
    p.add_argument("--text-errors", action="store_true",
                   help="error bodies and frames carry words only, no code (statuses unchanged)")
    p.add_argument("--goaway-top-level", action="store_true",
                   help="GOAWAY carries its reason at top level only, not also in `payload`")
    p.add_argument("--silent-refusals", action="store_true",
                   help="a refused WebSocket frame gets no answer at all (no error frame, no ack)")
    p.add_argument("--anyone-posts", action="store_true",
                   help="any account may post in a channel (the documents give owner-only posting "
                        "as a client-side rule, canPost), not only its owner")
    p.add_argument("--msgs-per-min", type=int, default=MSGS_PER_MIN,
                   help="new messages a user may send a minute; more are refused")
    p.add_argument("--plant", action="append",
                   choices=["no-dedup", "ack-before-durable", "read-newest", "drop-offline-delivered",
                            "invent-delivered", "rejected-can-message"],
                   help="a known bug, for testing the harness (repeatable)")
    return p.parse_args(argv)


if __name__ == "__main__":
    try:
        asyncio.run(main(parse(sys.argv[1:])))
    except KeyboardInterrupt:
        pass
