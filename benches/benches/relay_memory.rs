//! Issue 8 item 3, memory: the relay's heap per idle connection, and (as a profile of the
//! routing path) the heap allocations per routed message. A plain `main` with a counting
//! global allocator, so the timing benches (`relay_core.rs`) do not pay for the counting.
//!
//! * **Idle connection**: 10,000 accounts registered and logged in (setup), then for each a
//!   ticket, `handle_connect` and `sync`, everything drained, no traffic. The number is the
//!   growth of live heap bytes across that phase divided by 10,000 (it includes whatever the
//!   ticket path leaves behind, e.g. rate-limiter windows, and the connection's own state).
//! * **Allocations per routed message**: allocation calls and bytes of `handle_frame(msg)` +
//!   drain, averaged over 1,000 messages between two online members (after 1,000 warm-up).
//!   The inputs are built before the run. Counted three times: on the memory store (which
//!   keeps a copy of every row), on a store that keeps nothing (relay-core's own allocations),
//!   and on that store with every output frame encoded to its text as the server does (`encode`:
//!   the core task's share of a message but for the sockets and the commit).
//!   `--route-only N [memory|null|encode]` runs only this part (N messages after N warm-up, on
//!   all three or the one named), for an instruction count of the routing path that does not
//!   depend on the machine's load:
//!   `valgrind --tool=callgrind --toggle-collect='*route_measured*' <relay_memory binary>
//!   --route-only 1000 memory` counts `handle_frame` + drain of the N measured messages and of
//!   B's `delivered` receipts among them (one per 50 messages).
//!
//! * **Idle sockets, whole process**: the release `relay` binary as a child
//!   process (`--memory`), `N` accounts each with one authenticated, synced WebSocket from its
//!   own loopback address, heartbeats only (`{"type":"ping"}` every 25 s, as the reference
//!   clients send). The number is the growth of the relay process's resident set (`VmRSS`)
//!   across opening the sockets, divided by `N`: the shell's socket, WebSocket buffers, task and
//!   queues, and the core's connection state, as an operator would see it. Accounts are
//!   registered and logged in before the first reading, so their rows are not counted.
//!
//! Run: `cargo build --release -p relay-server --bin relay && cargo bench -p benches --bench
//! relay_memory` (under `cargo test --benches` it does a 100-connection smoke run, and skips the
//! process part if the release `relay` is not built).
#![allow(unsafe_code, reason = "counting allocator for a memory benchmark")]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

use std::time::Duration;

use benches::MachineInfo;
use benches::relay_load::BenchRelay;
use benches::relay_process::{RelayProcess, relay_binary};
use benches::relay_world::{Account, FRAME_SPACING_MS, RelayWorld, bench_config, msg_payload};
use relay_core::{ConnId, Output};
use wire::frames::{MsgFrame, ReceiptFrame};
use wire::{AliasId, ClientFrame, ConvId, MessageId, Seq};

/// [`System`] plus counters of live bytes and allocation calls.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static CALLS: AtomicUsize = AtomicUsize::new(0);

fn delta(bytes: usize) -> isize {
    isize::try_from(bytes).unwrap_or(isize::MAX)
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the
// counters are plain atomics and never affect the returned memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(delta(layout.size()), Ordering::Relaxed);
        CALLS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged (the caller upholds `GlobalAlloc::alloc`'s contract).
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(delta(layout.size()), Ordering::Relaxed);
        CALLS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(delta(layout.size()), Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by `System` with `layout` (every allocation goes through
        // this allocator).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(delta(new_size) - delta(layout.size()), Ordering::Relaxed);
        CALLS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as for `dealloc`; `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

fn idle_connections(n: usize) {
    let mut w = RelayWorld::new(bench_config());
    let mut accounts: Vec<Account> = (0..n).map(|_| w.account()).collect();
    let before = live();
    for a in &mut accounts {
        let conn = w.connect(a);
        w.sync(conn);
    }
    let after = live();
    assert!(accounts.iter().all(|a| w.relay.is_connected(a.conn())));
    let per = (after - before) as f64 / n as f64;
    println!(
        "idle connections: {n}, relay heap growth {} bytes, {per:.0} bytes/connection",
        after - before
    );
    // The part the connection itself holds: what closing them all gives back.
    let before_close = live();
    for a in &accounts {
        w.relay.handle_disconnect(w.now, a.conn());
    }
    w.drain();
    let freed = before_close - live();
    println!(
        "  freed by handle_disconnect of all: {freed} bytes, {:.0} bytes/connection",
        freed as f64 / n as f64
    );
}

/// One input of the routing run: a `msg` from A (counted), or B's `delivered` (not counted).
struct RoutedInput {
    conn: ConnId,
    frame: ClientFrame,
    counted: bool,
}

/// Two online, synced friends and their `msg` inputs, built ahead so that neither the
/// allocation count nor an instruction count (`--route-only`) includes building them.
struct Routing {
    w: RelayWorld,
    inputs: Vec<RoutedInput>,
}

/// `2 * n` messages A → B (the first `n` are warm-up), with B's `delivered` after every 50th,
/// on a relay over `store`.
fn routing(n: u64, store: Box<dyn relay_core::store::Store>) -> Routing {
    let mut w = RelayWorld::with_store(bench_config(), store);
    let mut a = w.account();
    let mut b = w.account();
    let conv = w.befriend(&a, &b);
    let ca = w.connect(&mut a);
    let cb = w.connect(&mut b);
    w.sync(ca);
    w.sync(cb);
    let conv = ConvId::parse(&conv).expect("conv");
    let a_alias = AliasId::parse(&a.alias).expect("alias");
    let b_alias = AliasId::parse(&b.alias).expect("alias");
    let payload = msg_payload();
    let mut inputs = Vec::new();
    for i in 1..=2 * n {
        inputs.push(RoutedInput {
            conn: ca,
            frame: ClientFrame::Msg(MsgFrame {
                id: MessageId::parse(&format!("m-{i}")).expect("id"),
                to: b_alias.clone(),
                conv_id: conv.clone(),
                crypto_v: Some(1),
                payload: payload.clone().into(),
            }),
            counted: true,
        });
        if i % 50 == 0 {
            inputs.push(RoutedInput {
                conn: cb,
                frame: ClientFrame::Delivered(ReceiptFrame {
                    conv_id: conv.clone(),
                    seq: Seq(i),
                    to: a_alias.clone(),
                    crypto_v: Some(1),
                }),
                counted: false,
            });
        }
    }
    Routing { w, inputs }
}

/// What [`route`] counted over its `msg` inputs.
#[derive(Default)]
struct RouteCount {
    msgs: usize,
    calls: usize,
    bytes: isize,
    outputs: usize,
}

/// Handles `inputs` (each followed by draining every output, one frame spacing apart) and
/// counts the allocations of the `msg` ones. The warm-up and the measured half go through
/// different functions so that `valgrind --tool=callgrind --toggle-collect` can select the
/// measured one (see `--route-only`).
#[inline(always)]
fn route(w: &mut RelayWorld, inputs: Vec<RoutedInput>, measured: bool, encode: bool) -> RouteCount {
    let mut count = RouteCount::default();
    for input in inputs {
        let (c0, l0) = (CALLS.load(Ordering::Relaxed), live());
        w.relay.handle_frame(w.now, input.conn, input.frame);
        let mut k = 0;
        while let Some(o) = w.relay.poll_output() {
            if encode && let Output::Send { frame, .. } = &o {
                std::hint::black_box(frame.encode());
            }
            drop(o);
            k += 1;
        }
        if input.counted {
            w.advance(FRAME_SPACING_MS);
        }
        if input.counted && measured {
            count.msgs += 1;
            count.calls += CALLS.load(Ordering::Relaxed) - c0;
            count.bytes += live() - l0;
            count.outputs += k;
        }
    }
    count
}

#[inline(never)]
fn route_warm_up(w: &mut RelayWorld, inputs: Vec<RoutedInput>, encode: bool) -> RouteCount {
    route(w, inputs, false, encode)
}

#[inline(never)]
fn route_measured(w: &mut RelayWorld, inputs: Vec<RoutedInput>, encode: bool) -> RouteCount {
    route(w, inputs, true, encode)
}

/// Counts the allocations of routing `n` messages on the memory store (which keeps a copy of
/// every row), then on a store that keeps nothing: relay-core's own, what a relay on a store
/// that binds rows by reference (SQLite, PostgreSQL) allocates in its core.
fn allocations_per_message(n: u64, only: Option<&str>) {
    let stores: [(&str, &str, Box<dyn relay_core::store::Store>, bool); 3] = [
        (
            "memory",
            "memory store (keeps a copy of every row)",
            Box::new(relay_core::store::MemoryStore::new()),
            false,
        ),
        (
            "null",
            "relay-core alone (a store that keeps nothing)",
            Box::new(relay_core::store::NullStore),
            false,
        ),
        (
            "encode",
            "relay-core alone, each output frame encoded",
            Box::new(relay_core::store::NullStore),
            true,
        ),
    ];
    for (name, what, store, encode) in stores {
        if only.is_some_and(|only| only != name) {
            continue;
        }
        let Routing { mut w, mut inputs } = routing(n, store);
        let half = inputs.len() / 2;
        let measured = inputs.split_off(half);
        route_warm_up(&mut w, inputs, encode);
        let c = route_measured(&mut w, measured, encode);
        assert_eq!(c.msgs, usize::try_from(n).expect("n"));
        assert_eq!(c.outputs, 2 * c.msgs, "ack + msg each");
        println!(
            "routed messages: {n}, {what}: {:.1} allocation calls/message, {:.0} bytes live \
             after each (message row until its receipt; the tombstone row for 7 days, and its \
             entry in the relay's cache)",
            c.calls as f64 / c.msgs as f64,
            c.bytes as f64 / c.msgs as f64
        );
    }
}

/// The reference clients' heartbeat period.
const HEARTBEAT: Duration = Duration::from_secs(25);

/// Sends a heartbeat on every socket if the last round is older than [`HEARTBEAT`].
async fn heartbeat_if_due(
    sockets: &mut [benches::relay_load::IdleSocket],
    last: &mut std::time::Instant,
) -> Result<(), Box<dyn std::error::Error>> {
    if last.elapsed() >= HEARTBEAT {
        for s in sockets.iter_mut() {
            s.ping().await?;
        }
        *last = benches::wall_now();
    }
    Ok(())
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Accounts first (not measured), then `n` idle sockets: the relay process's RSS per socket.
async fn idle_sockets_in_process(
    relay: &RelayProcess,
    n: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut bench = BenchRelay::external(relay.addr)?;
    // Warm-up: the runtime's threads, the allocator's arenas, a first round of sockets.
    for account in bench.idle_accounts(50).await? {
        account.connect().await?.close().await?;
    }
    let start = benches::wall_now();
    let accounts = bench.idle_accounts(n).await?;
    let registered = start.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let base = relay.rss_bytes()?;
    let start = benches::wall_now();
    let mut last_beat = benches::wall_now();
    let mut sockets = Vec::with_capacity(n);
    for account in accounts {
        sockets.push(account.connect().await?);
        if sockets.len() % 500 == 0 {
            heartbeat_if_due(&mut sockets, &mut last_beat).await?;
        }
    }
    let connected = start.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    heartbeat_if_due(&mut sockets, &mut last_beat).await?;
    let open = relay.rss_bytes()?;
    let per = open.saturating_sub(base) as f64 / n as f64;
    println!(
        "relay process: {n} accounts registered in {:.1} s, RSS {:.1} MiB; {n} idle \
         authenticated sockets opened in {:.1} s: RSS {:.1} MiB, {per:.0} bytes per socket",
        registered.as_secs_f64(),
        mib(base),
        connected.as_secs_f64(),
        mib(open)
    );
    for s in sockets {
        s.close().await?;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let closed = relay.rss_bytes()?;
    println!(
        "  after closing them all: RSS {:.1} MiB ({:.0} bytes per socket not given back to the \
         system: what the allocator keeps)",
        mib(closed),
        closed.saturating_sub(base) as f64 / n as f64
    );
    Ok(())
}

/// The release relay binary under `n` idle sockets (skipped when it is not built).
fn idle_sockets_whole_process(n: usize) {
    let Some(binary) = relay_binary() else {
        println!(
            "relay process: skipped (build it first: cargo build --release -p relay-server --bin relay)"
        );
        return;
    };
    let relay = match RelayProcess::spawn(
        &binary,
        &["--memory", "--pow-difficulty", "1", "--log", "warn"],
    ) {
        Ok(relay) => relay,
        Err(error) => {
            println!(
                "relay process: could not start {}: {error}",
                binary.display()
            );
            return;
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(error) = runtime.block_on(idle_sockets_in_process(&relay, n)) {
        println!("relay process: run failed: {error}");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--bench");
    println!("{}", MachineInfo::detect());
    if let Some(i) = args.iter().position(|a| a == "--route-only") {
        let n = args
            .get(i + 1)
            .and_then(|n| n.parse().ok())
            .expect("--route-only N [memory|null|encode]");
        let only = args.get(i + 2).map(String::as_str);
        assert!(
            only.is_none_or(|s| ["memory", "null", "encode"].contains(&s)),
            "--route-only N [memory|null|encode]"
        );
        allocations_per_message(n, only);
        return;
    }
    if full {
        idle_connections(10_000);
        allocations_per_message(1_000, None);
        idle_sockets_whole_process(10_000);
    } else {
        idle_connections(100);
        allocations_per_message(100, None);
        idle_sockets_whole_process(100);
    }
}
