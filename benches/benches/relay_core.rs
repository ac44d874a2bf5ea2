//! Issue 8 item 3: the relay core's hot paths, sans IO, on a `MemoryStore` under a virtual
//! clock. Every world is set up through the relay's public HTTP / WebSocket inputs
//! (`benches::relay_world`): register (PoW difficulty 1), auth, befriend, connect, sync.
//!
//! * `relay_core/route_msg`: one `msg` from A to B, both online and synced: `handle_frame` +
//!   draining `poll_output` (the ack to A and the `msg` to B). Throughput = routed messages/s.
//!   B acknowledges with a `delivered` receipt every 50 messages, as a client batches them
//!   (otherwise the 100-message in-flight window closes); the rows say whether that receipt
//!   is inside the timing. `handle_text+encode` adds what the shell does around the core:
//!   decoding the text frame and encoding every output frame.
//! * `relay_core/offline_sync_1000`: B offline while A sends 1,000 messages (setup), then B's
//!   connect + `sync` + draining, with a `delivered` receipt per 100-message batch until all
//!   1,000 arrived.
//! * `relay_core/channel_post_fanout_1000`: the owner posts (HTTP CH7) to a channel with 1,000
//!   online, synced subscribers; the post + draining the 1,001 `channel_post` frames.
//! * `relay_core/expire_holds_10000`: 10,000 pending vanity purchases (10 buyers × 1,000 aliases
//!   of a 10,000-alias catalog), the clock moved past the 15-minute hold, `handle_timeout`.
//!
//! * `relay_core/handoff`: one message through the hand-off between shards
//!   (`relay_core::handoff`): the owner's outbox row and its send, the recipient shard's apply,
//!   the acknowledgement every 50 messages. What a message crossing shards adds in the core.
//!
//! * `relay_core/route_msg_across`: `route_msg`'s `handle_frame` row with A and B on two
//!   shards of a two-shard map (two relay cores over one store, A's shard owning the
//!   conversation): A's `msg` at A's core, its hand-off carried to B's core and applied and
//!   delivered there, the acknowledgement carried back (1 per 50, as B's receipts). Both
//!   cores' time, no transport: what crossing shards costs over `route_msg`.
//!
//! Memory per idle connection is in `relay_memory.rs` (it needs a counting global allocator,
//! which would also slow every allocation measured here).
//!
//! Run: `cargo bench -p benches --bench relay_core`.

use std::hint::black_box;
use std::time::Duration;

use benches::MachineInfo;
use benches::relay_world::{Account, FRAME_SPACING_MS, RelayWorld, bench_config, msg_payload};
use criterion::{BatchSize, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use relay_core::{HttpRequest, Method, Output, WsConnect};
use serde_json::json;
use wire::frames::{MsgFrame, ReceiptFrame};
use wire::{AliasId, ClientFrame, ConvId, MessageId, Seq, ServerFrame};

/// B acknowledges every this many messages (one `delivered` covering them all).
const RECEIPT_EVERY: u64 = 50;

/// Two online, synced friends.
struct Pair {
    w: RelayWorld,
    a: Account,
    b: Account,
    conv: ConvId,
    a_alias: AliasId,
    b_alias: AliasId,
    payload: String,
    /// Messages sent so far (= the conversation's last seq: only A writes).
    sent: u64,
}

impl Pair {
    fn new() -> Self {
        let mut w = RelayWorld::new(bench_config());
        let mut a = w.account();
        let mut b = w.account();
        let conv = w.befriend(&a, &b);
        let ca = w.connect(&mut a);
        let cb = w.connect(&mut b);
        w.sync(ca);
        w.sync(cb);
        Self {
            a_alias: AliasId::parse(&a.alias).expect("alias"),
            b_alias: AliasId::parse(&b.alias).expect("alias"),
            conv: ConvId::parse(&conv).expect("conv id"),
            w,
            a,
            b,
            payload: msg_payload(),
            sent: 0,
        }
    }

    fn msg(&self, n: u64) -> MsgFrame {
        MsgFrame {
            id: MessageId::parse(&format!("bench-{n}")).expect("message id"),
            to: self.b_alias.clone(),
            conv_id: self.conv.clone(),
            crypto_v: Some(1),
            payload: self.payload.clone().into(),
        }
    }

    /// B's `delivered` up to everything sent; returns the outputs drained.
    fn receipt(&mut self) -> usize {
        let r = ClientFrame::Delivered(ReceiptFrame {
            conv_id: self.conv.clone(),
            seq: Seq(self.sent),
            to: self.a_alias.clone(),
            crypto_v: Some(1),
        });
        self.w.relay.handle_frame(self.w.now, self.b.conn(), r);
        self.w.drain()
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum RouteMode {
    /// `handle_frame` + drain; receipts outside the timing.
    Frame,
    /// `handle_frame` + drain, B's receipt (1 per 50) inside the timing.
    FrameWithReceipts,
    /// decode the text frame, `handle_text`, drain and encode every output frame.
    TextEncode,
}

fn route_one(c: &mut Criterion, name: &str, mode: RouteMode) {
    let mut g = c.benchmark_group("relay_core/route_msg");
    g.throughput(Throughput::Elements(1));
    // Setups run lazily inside the closure, so a filtered run skips them.
    let mut pair = None;
    g.bench_function(name, |bench| {
        let p = pair.get_or_insert_with(Pair::new);
        bench.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut done = 0;
            let mut outputs = 0;
            while done < iters {
                let n = (iters - done).min(RECEIPT_EVERY);
                // Inputs are built outside the timing (a shell gets them from the socket).
                let frames: Vec<MsgFrame> = (0..n).map(|i| p.msg(p.sent + i + 1)).collect();
                let texts: Vec<String> = if mode == RouteMode::TextEncode {
                    frames
                        .iter()
                        .map(|m| ClientFrame::Msg(m.clone()).encode())
                        .collect()
                } else {
                    Vec::new()
                };
                let conn = p.a.conn();
                let start = benches::wall_now();
                if mode == RouteMode::TextEncode {
                    for t in &texts {
                        p.w.relay.handle_text(p.w.now, conn, t);
                        while let Some(o) = p.w.relay.poll_output() {
                            if let Output::Send { frame, .. } = &o {
                                black_box(frame.encode());
                            }
                            outputs += 1;
                        }
                        p.w.now = p.w.now.plus_ms(FRAME_SPACING_MS);
                    }
                } else {
                    for m in frames {
                        p.w.relay.handle_frame(p.w.now, conn, ClientFrame::Msg(m));
                        while let Some(o) = p.w.relay.poll_output() {
                            black_box(o);
                            outputs += 1;
                        }
                        p.w.now = p.w.now.plus_ms(FRAME_SPACING_MS);
                    }
                }
                p.sent += n;
                if mode == RouteMode::FrameWithReceipts {
                    p.receipt();
                    total += start.elapsed();
                } else {
                    total += start.elapsed();
                    p.receipt();
                }
                done += n;
            }
            // Every message must have produced exactly its ack and its delivery.
            assert_eq!(outputs, 2 * iters, "a message was refused or not delivered");
            total
        });
    });
    g.finish();
}

fn route_msg(c: &mut Criterion) {
    route_one(c, "handle_frame", RouteMode::Frame);
    route_one(c, "handle_frame+receipts", RouteMode::FrameWithReceipts);
    route_one(c, "handle_text+encode", RouteMode::TextEncode);
}

/// B offline while A sent 1,000 messages; B's ticket is ready.
fn offline_world() -> (Pair, WsConnect) {
    let mut w = RelayWorld::new(bench_config());
    let mut a = w.account();
    let b = w.account();
    let conv = w.befriend(&a, &b);
    let ca = w.connect(&mut a);
    w.sync(ca);
    let mut p = Pair {
        a_alias: AliasId::parse(&a.alias).expect("alias"),
        b_alias: AliasId::parse(&b.alias).expect("alias"),
        conv: ConvId::parse(&conv).expect("conv id"),
        w,
        a,
        b,
        payload: msg_payload(),
        sent: 0,
    };
    for i in 1..=1000 {
        let m = p.msg(i);
        p.w.relay.handle_frame(p.w.now, ca, ClientFrame::Msg(m));
        assert_eq!(p.w.drain(), 1, "only the ack: B is offline");
        p.w.advance(FRAME_SPACING_MS);
    }
    p.sent = 1000;
    assert_eq!(p.w.relay.queued_messages(), 1000);
    let ticket = p.w.ticket(&p.b);
    (p, ticket)
}

fn offline_sync(c: &mut Criterion) {
    let mut g = c.benchmark_group("relay_core/offline_sync_1000");
    g.throughput(Throughput::Elements(1000));
    g.sampling_mode(SamplingMode::Flat);
    g.sample_size(20);
    g.warm_up_time(Duration::from_millis(1));
    g.measurement_time(Duration::from_millis(100));
    g.bench_function("connect+sync+receipts", |bench| {
        bench.iter_batched(
            offline_world,
            |(mut p, ticket)| {
                let now = p.w.now;
                let conn = p.w.next_conn();
                p.w.relay
                    .handle_connect(now, conn, &ticket)
                    .expect("B connects");
                p.w.relay
                    .handle_frame(now, conn, ClientFrame::Sync(Default::default()));
                let mut got = 0u64;
                let mut high = 0u64;
                loop {
                    while let Some(o) = p.w.relay.poll_output() {
                        if let Output::Send {
                            frame: ServerFrame::Msg(m),
                            ..
                        } = &o
                        {
                            got += 1;
                            high = high.max(m.seq.get());
                        }
                        black_box(o);
                    }
                    if got >= 1000 {
                        break;
                    }
                    let r = ClientFrame::Delivered(ReceiptFrame {
                        conv_id: p.conv.clone(),
                        seq: Seq(high),
                        to: p.a_alias.clone(),
                        crypto_v: Some(1),
                    });
                    p.w.relay.handle_frame(now, conn, r);
                }
                assert_eq!(high, 1000);
                p
            },
            BatchSize::PerIteration,
        );
    });
    g.finish();
}

const SUBSCRIBERS: usize = 1000;

/// A channel with 1,000 online, synced subscribers; returns the world and the owner's post.
fn fanout_world() -> (RelayWorld, HttpRequest) {
    let mut w = RelayWorld::new(bench_config());
    let mut owner = w.account();
    let v = w.call(
        Method::Post,
        "/api/v1/channels",
        &json!({"name": "bench channel", "description": "", "is_public": true}),
        Some(&owner.token),
    );
    let channel = v["channel_id"].as_str().expect("channel id").to_owned();
    for _ in 0..SUBSCRIBERS {
        let mut s = w.account();
        w.call(
            Method::Post,
            &format!("/api/v1/channels/{channel}/subscribe"),
            &json!({}),
            Some(&s.token),
        );
        let conn = w.connect(&mut s);
        w.sync(conn);
    }
    let conn = w.connect(&mut owner);
    w.sync(conn);
    let post = HttpRequest::new(Method::Post, format!("/api/v1/channels/{channel}/posts"))
        .json(&json!({"type": "text", "content": "x".repeat(200)}))
        .bearer(&owner.token);
    let r = w.http(&post);
    assert_eq!(r.status, 201, "{}", r.body_json());
    assert_eq!(
        w.drain(),
        SUBSCRIBERS + 1,
        "one frame per subscriber + owner"
    );
    (w, post)
}

fn channel_fanout(c: &mut Criterion) {
    let mut g = c.benchmark_group("relay_core/channel_post_fanout_1000");
    g.throughput(Throughput::Elements(SUBSCRIBERS as u64));
    g.sample_size(20);
    let mut world = None;
    g.bench_function("post+drain", |bench| {
        let (w, post) = world.get_or_insert_with(fanout_world);
        bench.iter(|| {
            let r = w.relay.handle_http(w.now, black_box(&*post));
            let mut n = 0;
            while let Some(o) = w.relay.poll_output() {
                black_box(o);
                n += 1;
            }
            (r.status, n)
        });
    });
    g.finish();
}

const HOLDS: usize = 10_000;
const BUYERS: usize = 10;

fn catalog_alias(i: usize) -> String {
    format!("2{i:07}")
}

/// A relay with 10,000 pending vanity purchases, the clock past their 15-minute hold.
fn holds_world() -> RelayWorld {
    let mut config = bench_config();
    // Setup only: 1,000 purchases per buyer at one instant is past the per-account budget.
    config.account_requests = relay_core::limits::Budget {
        burst: u32::MAX,
        per_window: u32::MAX,
        window_ms: 60_000,
    };
    // The bench measures expiry, not the caps that stop one buyer or network holding many.
    config.vanity_holds_per_account = usize::MAX;
    config.vanity_holds_per_network = usize::MAX;
    config.vanity_catalog = (0..HOLDS)
        .map(|i| AliasId::parse(&catalog_alias(i)).expect("alias"))
        .collect();
    let mut w = RelayWorld::new(config);
    let buyers: Vec<Account> = (0..BUYERS).map(|_| w.account()).collect();
    for i in 0..HOLDS {
        let buyer = &buyers[i % BUYERS];
        let r = w.http(
            &HttpRequest::new(Method::Post, "/api/v1/vanity/purchase")
                .json(&json!({"alias_id": catalog_alias(i)}))
                .bearer(&buyer.token),
        );
        assert_eq!(r.status, 201, "{}", r.body_json());
    }
    w.drain();
    w.advance(relay_core::limits::ALIAS_HOLD_MS + 1_000);
    w
}

fn available(w: &mut RelayWorld, prefix: &str) -> usize {
    let r = w.http(&HttpRequest::new(
        Method::Get,
        format!("/api/v1/vanity/search?q={prefix}"),
    ));
    r.body_json().as_array().map_or(0, Vec::len)
}

/// Checks once that the holds exist and that `handle_timeout` releases them.
fn check_holds() {
    let mut w = holds_world();
    assert_eq!(available(&mut w, "2000000"), 0, "all held");
    w.relay.handle_timeout(w.now);
    w.drain();
    assert_eq!(available(&mut w, "2000000"), 10, "released");
}

fn expire_holds(c: &mut Criterion) {
    let mut checked = false;
    let mut g = c.benchmark_group("relay_core/expire_holds_10000");
    g.throughput(Throughput::Elements(HOLDS as u64));
    g.sampling_mode(SamplingMode::Flat);
    g.sample_size(10);
    g.warm_up_time(Duration::from_millis(1));
    g.measurement_time(Duration::from_millis(10));
    g.bench_function("handle_timeout", |bench| {
        if !checked {
            check_holds();
            checked = true;
        }
        bench.iter_batched(
            holds_world,
            |mut w| {
                w.relay.handle_timeout(w.now);
                w.drain();
                w
            },
            BatchSize::PerIteration,
        );
    });
    g.finish();
}

/// Two cores of a two-shard map over one store, A on the owner's shard and B on the other's,
/// both connected and synced.
struct Across {
    cores: [RelayWorld; 2],
    a: Account,
    b: Account,
    /// A's and B's shards.
    at: [usize; 2],
    pair: (ConvId, AliasId, AliasId),
    payload: String,
    sent: u64,
}

impl Across {
    fn new() -> Self {
        use relay_core::handoff::{ShardId, ShardMap, ShardPlace};
        let map = ShardMap::new(2).expect("two shards");
        let shard = |a: &Account| {
            usize::from(
                map.of_user(&wire::UserUuid::parse(&a.uuid).expect("uuid"))
                    .0,
            )
        };
        let mem = relay_core::store::MemoryStore::new();
        let mut setup = RelayWorld::with_store(bench_config(), Box::new(mem.clone()));
        let first = setup.account();
        let second = std::iter::repeat_with(|| setup.account())
            .find(|b| shard(b) != shard(&first))
            .expect("an account on the other shard");
        let (mut a, mut b) = if first.uuid < second.uuid {
            (first, second)
        } else {
            (second, first)
        };
        let conv = setup.befriend(&a, &b);
        drop(setup);
        let core = |i: u16| {
            let mut config = bench_config();
            config.shard = ShardPlace::new(map, ShardId(i)).expect("a shard of the map");
            RelayWorld::with_store(config, Box::new(mem.clone()))
        };
        let mut cores = [core(0), core(1)];
        let at = [shard(&a), shard(&b)];
        for (u, i) in [(&mut a, at[0]), (&mut b, at[1])] {
            let c = cores[i].connect(u);
            cores[i].sync(c);
        }
        let mut across = Self {
            pair: (
                ConvId::parse(&conv).expect("conv id"),
                AliasId::parse(&a.alias).expect("alias"),
                AliasId::parse(&b.alias).expect("alias"),
            ),
            cores,
            a,
            b,
            at,
            payload: msg_payload(),
            sent: 0,
        };
        // As after any start, each core asks the other how full its queues are.
        for i in 0..2 {
            let w = &mut across.cores[i];
            w.relay.handle_timeout(w.now);
            let mut outs = Vec::new();
            w.drain_into(&mut outs);
            across.carry(outs);
        }
        across
    }

    /// Hands `outs`' crossings to the cores they go to, and theirs, until none is left;
    /// returns the other outputs.
    fn carry(&mut self, mut outs: Vec<Output>) -> usize {
        let mut other = 0;
        while let Some(o) = outs.pop() {
            match o {
                Output::Cross(c) => {
                    let w = &mut self.cores[usize::from(c.to().0)];
                    w.relay.handle_crossing(w.now, c);
                    w.drain_into(&mut outs);
                }
                o => {
                    black_box(o);
                    other += 1;
                }
            }
        }
        other
    }

    /// A's message `n`, handled and carried: the outputs that are not crossings.
    fn send(&mut self, n: u64) -> usize {
        let (conv, _, b_alias) = &self.pair;
        let m = MsgFrame {
            id: MessageId::parse(&format!("bench-{n}")).expect("message id"),
            to: b_alias.clone(),
            conv_id: conv.clone(),
            crypto_v: Some(1),
            payload: self.payload.clone().into(),
        };
        let w = &mut self.cores[self.at[0]];
        w.relay
            .handle_frame(w.now, self.a.conn(), ClientFrame::Msg(m));
        w.now = w.now.plus_ms(FRAME_SPACING_MS);
        let mut outs = Vec::new();
        w.drain_into(&mut outs);
        self.carry(outs)
    }

    /// B's `delivered` through everything sent, carried (its notice to A's shard).
    fn receipt(&mut self) {
        let (conv, a_alias, _) = &self.pair;
        let r = ClientFrame::Delivered(ReceiptFrame {
            conv_id: conv.clone(),
            seq: Seq(self.sent),
            to: a_alias.clone(),
            crypto_v: Some(1),
        });
        let w = &mut self.cores[self.at[1]];
        w.relay.handle_frame(w.now, self.b.conn(), r);
        let mut outs = Vec::new();
        w.drain_into(&mut outs);
        self.carry(outs);
    }
}

fn route_msg_across(c: &mut Criterion) {
    let mut g = c.benchmark_group("relay_core/route_msg_across");
    g.throughput(Throughput::Elements(1));
    let mut across = None;
    g.bench_function("handle_frame", |bench| {
        let p = across.get_or_insert_with(Across::new);
        bench.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut outputs = 0;
            for _ in 0..iters {
                let start = benches::wall_now();
                outputs += p.send(p.sent + 1);
                total += start.elapsed();
                p.sent += 1;
                if p.sent.is_multiple_of(RECEIPT_EVERY) {
                    p.receipt();
                }
            }
            // Every message must have produced exactly its ack and its delivery.
            assert_eq!(
                outputs as u64,
                2 * iters,
                "a message was refused or not delivered"
            );
            total
        });
    });
    g.finish();
}

/// `relay_core/handoff`: one message handed from its conversation's owner shard to its
/// recipient's through `relay_core::handoff`: the outbox's row, the poll that sends it, the
/// inbox's apply, and every 50 messages the durable mark's acknowledgement and the outbox's
/// deletes (as `route_msg` counts a receipt every 50). The core's own cost of a message that
/// crosses shards, beside `route_msg`'s; no transport, no commit.
fn handoff(c: &mut Criterion) {
    use relay_core::handoff::{Inbox, MAX_HELD, Outbox, Received, ShardId, Stream};
    let mut g = c.benchmark_group("relay_core");
    g.throughput(Throughput::Elements(1));
    let stream = Stream {
        recipient: wire::UserUuid::from_random_bytes([7; 16]),
        conv: ConvId::parse("c-0123456789abcdef01234567").expect("a conversation id"),
    };
    let item: std::sync::Arc<str> = msg_payload().into();
    let mut out = Outbox::new(ShardId(0));
    let mut inbox = Inbox::new(ShardId(1), MAX_HELD);
    let mut seq = 0u64;
    g.bench_function("handoff", |b| {
        b.iter(|| {
            seq += 1;
            out.push(
                ShardId(1),
                stream.clone(),
                Seq(seq),
                Seq(seq - 1),
                std::sync::Arc::clone(&item),
            );
            for h in out.poll(wire::UnixMs(seq)) {
                if let Ok(Received::Apply(applied)) = inbox.receive(h) {
                    black_box(applied);
                }
            }
            if seq.is_multiple_of(RECEIPT_EVERY)
                && let Some(ack) = inbox.durable(&stream, Seq(seq))
            {
                black_box(out.on_applied(&ack));
            }
        });
    });
    g.finish();
}

fn machine(_: &mut Criterion) {
    println!("{}", MachineInfo::detect());
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = relay_core;
    config = config();
    targets = machine, route_msg, route_msg_across, offline_sync, channel_fanout, expire_holds, handoff
}
criterion_main!(relay_core);
