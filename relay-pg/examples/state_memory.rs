//! What relay-core keeps in memory, and in the store, per user, per conversation and per message:
//! the numbers that decide how to run N active relays (ARCHITECTURE.md, "Running N active
//! relays"). A counting global allocator; the relay driven only through its public inputs on a
//! `MemoryStore` under a virtual clock (as `benches::relay_world` does; that crate is not a
//! dependency here because the relay shell will depend on this one).
//!
//! ```text
//! cargo run --release -p relay-pg --example state_memory -- [--users N]
//! ```
//!
//! Phases, each reported as live-heap growth divided by its count (a run whose store keeps
//! nothing, so only the relay's own state counts), and as the bytes of keys plus values it added
//! to the store (the same inputs on a `MemoryStore`):
//! 1. `users`: N accounts registered and logged in, no connection (PoW at difficulty 1, one
//!    source address each; the per-address rate-limit windows they leave are memory-only and
//!    swept, and are included). Then `users at rest`: the same accounts an hour later, once
//!    `handle_timeout` has swept those windows and expired the used challenges (what an
//!    account costs for as long as it exists).
//! 2. `conversations`: N/2 friendships accepted (each makes one conversation). Then
//!    `conversations at rest`: an hour later, once the request budgets are swept: what the
//!    conversation cache and the two members' contact lists hold for it (both caches are far
//!    from their bounds here), with the caches' own estimate printed beside it.
//! 3. `queued messages`: M (at most `MAX_OFFLINE_QUEUE_PER_CONVERSATION`) messages of 228 B
//!    payload (a 200-byte text) from an online sender to an offline recipient: kept until
//!    delivered or `offline_ttl` (24 h).
//! 4. `delivered messages`: the recipient connects, syncs and acknowledges: the message rows go,
//!    the 7-day dedup tombstones (and their timers) stay.

#![allow(unsafe_code, reason = "counting allocator for a memory measurement")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    alloc::{GlobalAlloc, Layout, System},
    sync::atomic::{AtomicIsize, Ordering},
};

use client_core::{encoding::to_base64, keys::SigningKeyPair};
use relay_core::{
    Config, ConnId, HttpRequest, Method, Relay, WsConnect,
    store::{MemoryStore, NullStore, Snapshot, Store},
};
use serde_json::{Value, json};
use wire::UnixMs;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

fn delta(bytes: usize) -> isize {
    isize::try_from(bytes).unwrap_or(isize::MAX)
}

// SAFETY: every method forwards to `System` unchanged; the counter never affects the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(delta(layout.size()), Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(delta(layout.size()), Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(delta(layout.size()), Ordering::Relaxed);
        // SAFETY: `ptr` came from `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(delta(new_size) - delta(layout.size()), Ordering::Relaxed);
        // SAFETY: as for `dealloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

struct Account {
    uuid: String,
    alias: String,
    token: String,
}

struct World {
    relay: Relay,
    /// `None` in the heap run.
    store: Option<MemoryStore>,
    now: UnixMs,
    next: u32,
}

impl World {
    fn new(keep_rows: bool) -> Self {
        let config = Config {
            pow_difficulty: 1,
            registrations_per_hour_per_addr: u32::MAX,
            msgs_per_min_per_user: u32::MAX,
            ..Config::default()
        };
        let store = keep_rows.then(MemoryStore::new);
        let boxed: Box<dyn Store> = match &store {
            Some(store) => Box::new(store.clone()),
            None => Box::new(NullStore),
        };
        let relay = Relay::new(config, boxed, 1).unwrap();
        Self {
            relay,
            store,
            now: UnixMs(1_800_000_000_000),
            next: 1,
        }
    }

    fn drain(&mut self) {
        while self.relay.poll_output().is_some() {}
    }

    fn call(&mut self, method: Method, path: &str, body: &Value, token: Option<&str>) -> Value {
        let mut req = HttpRequest::new(method, path).json(body);
        if let Some(t) = token {
            req = req.bearer(t);
        }
        let r = self.relay.handle_http(self.now, &req);
        assert!((200..300).contains(&r.status), "{path}: {}", r.body_json());
        self.drain();
        r.body_json()
    }

    fn account(&mut self) -> Account {
        let k = self.next;
        self.next += 1;
        let mut seed = [0xA5u8; 32];
        seed[..4].copy_from_slice(&k.to_le_bytes());
        let sk = SigningKeyPair::from_private_bytes(&seed);
        let addr = format!("10.{}.{}.{}", (k >> 16) & 0xff, (k >> 8) & 0xff, k & 0xff);
        let req = HttpRequest::new(Method::Post, "/api/v1/pow/challenge").from_addr(&addr);
        let v = self.relay.handle_http(self.now, &req).body_json();
        let nonce = relay_core::pow::solve(
            v["challenge_string"].as_str().unwrap(),
            u32::try_from(v["difficulty"].as_u64().unwrap()).unwrap(),
        );
        let body = json!({
            "ed25519_public_key": to_base64(&sk.public_key()),
            "x25519_public_key": to_base64(&seed),
            "nickname": format!("user{k}"),
            "pow_nonce": nonce,
        });
        let req = HttpRequest::new(Method::Post, "/api/v1/register")
            .json(&body)
            .from_addr(&addr);
        let r = self.relay.handle_http(self.now, &req);
        assert_eq!(r.status, 201, "register: {}", r.body_json());
        let v = r.body_json();
        let uuid = v["uuid"].as_str().unwrap().to_owned();
        let alias = v["alias_id"].as_str().unwrap().to_owned();
        let c = self.call(
            Method::Post,
            "/api/v1/auth/challenge",
            &json!({"user_uuid": uuid}),
            None,
        );
        let challenge = c["challenge"].as_str().unwrap().to_owned();
        let sig = sk.sign(challenge.as_bytes());
        let v = self.call(
            Method::Post,
            "/api/v1/auth/verify",
            &json!({"user_uuid": uuid, "challenge": challenge, "signature": to_base64(&sig)}),
            None,
        );
        Account {
            uuid,
            alias,
            token: v["token"].as_str().unwrap().to_owned(),
        }
    }

    fn befriend(&mut self, a: &Account, b: &Account) -> String {
        let v = self.call(
            Method::Post,
            "/api/v1/friends/request",
            &json!({"to_alias_id": b.alias}),
            Some(&a.token),
        );
        let id = v["friendship_id"].as_u64().unwrap();
        let v = self.call(
            Method::Put,
            &format!("/api/v1/friends/{id}/accept"),
            &json!({}),
            Some(&b.token),
        );
        v["conversation_id"].as_str().unwrap().to_owned()
    }

    fn connect(&mut self, a: &Account, conn: u64) -> ConnId {
        let v = self.call(
            Method::Post,
            "/api/v1/ws/ticket",
            &json!({}),
            Some(&a.token),
        );
        let req = WsConnect {
            query: format!(
                "user_uuid={}&ticket={}",
                a.uuid,
                v["ticket"].as_str().unwrap()
            ),
            protocol: None,
        };
        let conn = ConnId(conn);
        assert!(self.relay.handle_connect(self.now, conn, &req).is_ok());
        self.drain();
        self.text(conn, &json!({"type": "sync", "crypto_v": 1}));
        conn
    }

    fn text(&mut self, conn: ConnId, frame: &Value) {
        self.relay.handle_text(self.now, conn, &frame.to_string());
        self.drain();
    }

    /// Bytes of keys + values per table.
    fn stored(&self) -> Snapshot {
        self.store
            .as_ref()
            .map(|s| s.clone().load().unwrap())
            .unwrap_or_default()
    }
}

fn stored_bytes(s: &Snapshot) -> usize {
    s.values()
        .flat_map(|t| t.iter())
        .map(|(k, v)| k.len() + v.len())
        .sum()
}

fn report(what: &str, n: usize, heap: isize, before: &Snapshot, after: &Snapshot) {
    let per_table: Vec<String> = after
        .iter()
        .filter_map(|(t, rows)| {
            let old = before.get(t).map_or(0, |r| r.len());
            (rows.len() != old)
                .then(|| format!("{} {:+}", t.name(), rows.len() as isize - old as isize))
        })
        .collect();
    let stored = stored_bytes(after) as isize - stored_bytes(before) as isize;
    println!(
        "| {what} | {n} | {:.0} | {:.0} | {} |",
        heap as f64 / n as f64,
        stored as f64 / n as f64,
        per_table.join(", ")
    );
}

/// What one phase left: relay heap growth, store content before and after, count.
struct Phase {
    name: &'static str,
    count: usize,
    heap: isize,
    before: Snapshot,
    after: Snapshot,
}

/// Runs every phase on one world; the relay is deterministic (seeded), so the heap run and the
/// rows run see the same inputs and produce the same state.
fn run(users: usize, keep_rows: bool) -> Vec<Phase> {
    let mut w = World::new(keep_rows);
    let mut phases = Vec::new();
    let mut mark = (live(), w.stored());
    let mut end = |w: &World,
                   name,
                   count,
                   mark: &mut (isize, Snapshot),
                   from_start: Option<&(isize, Snapshot)>| {
        let now = (live(), w.stored());
        let start = from_start.unwrap_or(mark);
        phases.push(Phase {
            name,
            count,
            heap: now.0 - start.0,
            before: start.1.clone(),
            after: now.1.clone(),
        });
        *mark = now;
    };

    let before_users = mark.clone();
    let accounts: Vec<Account> = (0..users).map(|_| w.account()).collect();
    end(
        &w,
        "users (registered, logged in, offline)",
        users,
        &mut mark,
        None,
    );
    w.now = w.now.plus_ms(relay_core::limits::HOUR_MS);
    w.relay.handle_timeout(w.now);
    w.drain();
    end(
        &w,
        "users at rest (an hour later: windows swept, used challenges expired)",
        users,
        &mut mark,
        Some(&before_users),
    );

    let before_convs = mark.clone();
    let convs: Vec<String> = accounts
        .chunks(2)
        .map(|pair| w.befriend(&pair[0], &pair[1]))
        .collect();
    end(
        &w,
        "conversations (friendship accepted)",
        convs.len(),
        &mut mark,
        None,
    );
    w.now = w.now.plus_ms(relay_core::limits::HOUR_MS);
    w.relay.handle_timeout(w.now);
    w.drain();
    end(
        &w,
        "conversations at rest (an hour later: request budgets swept; each conversation and its two contact lists in the caches)",
        convs.len(),
        &mut mark,
        Some(&before_convs),
    );
    let held = w.relay.relation_cache();
    println!(
        "caches' estimate: {} B per conversation, {} B per contact list of one friendship",
        held.conversation_bytes / held.conversations.max(1),
        held.contact_bytes / held.contact_lists.max(1)
    );

    // Messages: the first pair, sender online, recipient offline.
    let (a, b) = (&accounts[0], &accounts[1]);
    let ca = w.connect(a, 1);
    mark = (live(), w.stored());
    let before_messages = mark.clone();
    let messages = users.min(relay_core::limits::MAX_OFFLINE_QUEUE_PER_CONVERSATION);
    let payload = to_base64(&[0x42u8; 12 + 200 + 16]);
    for i in 0..messages {
        w.now = w.now.plus_ms(101); // 600 frames per connection per minute
        w.text(
            ca,
            &json!({"type": "msg", "id": format!("m-{i:08}"), "to": b.alias,
                    "conv_id": convs[0], "crypto_v": 1, "payload": payload}),
        );
    }
    end(
        &w,
        "queued messages (recipient offline)",
        messages,
        &mut mark,
        None,
    );

    let cb = w.connect(b, 2);
    // The relay pushes SYNC_WINDOW_MSGS messages at a time; each receipt opens the next window.
    let batch = relay_core::limits::SYNC_WINDOW_MSGS;
    for upto in (batch..=messages).step_by(batch).chain([messages]) {
        w.now = w.now.plus_ms(101);
        w.text(
            cb,
            &json!({"type": "delivered", "conv_id": convs[0], "seq": upto, "to": a.alias, "crypto_v": 1}),
        );
    }
    end(
        &w,
        "delivered messages (7-day tombstones left; includes the recipient's connection)",
        messages,
        &mut mark,
        Some(&before_messages),
    );
    if keep_rows {
        assert!(
            !w.stored().contains_key(&relay_core::store::Table::Messages),
            "every message was delivered"
        );
    }
    phases
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!(
            "state_memory [--users N]: relay-core memory and store bytes per user/conversation/message"
        );
        return;
    }
    let users = args
        .iter()
        .position(|a| a == "--users")
        .and_then(|i| args.get(i + 1))
        .map_or(2_000, |n| n.parse().expect("--users N"));
    let heap = run(users, false);
    let rows = run(users, true);
    println!(
        "| phase | count | relay heap bytes each | stored bytes each (keys + values) | rows |"
    );
    println!("|---|---:|---:|---:|---|");
    for (h, r) in heap.iter().zip(&rows) {
        report(h.name, h.count, h.heap, &r.before, &r.after);
    }
}
