//! Memory of an idle authenticated WebSocket (issue 17, D6), as a regression test: the heap a
//! relay server and its clients hold for each idle, synced socket, counted by a global
//! allocator in this test process. The WebSocket library's default buffers (128 KiB each way)
//! made a socket cost ~136 KB; the relay now reserves 4 KiB to read and writes through a
//! 4 KiB buffer. The figure for an operator (the release binary's RSS per socket with 10,000
//! sockets) is in BENCHMARKS.md (`cargo bench -p benches --bench relay_memory`).
//!
//! Counted here: what the relay server's thread allocates (it runs on a runtime of its own;
//! the clients run on the test's thread and are not counted): socket, WebSocket state and
//! buffers, the socket task, its queue, the core's connection state. The bound checked is the
//! issue's: at most 16 KiB per idle connection.
#![allow(unsafe_code, reason = "a counting global allocator")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use relay_core::{Config, MemoryBlobStore, store::MemoryStore};
use relay_server::RelayServer;
use seam::net::{Listener as _, Network, Tokio};
use tokio::sync::Notify;

mod common;
use common::{FromAddr, account, connect};

/// [`System`] plus a counter of the live heap bytes allocated (and freed) on threads that
/// opted in.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

thread_local! {
    /// Whether this thread's allocations are counted (the relay server's thread).
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

fn count(bytes: isize) {
    if COUNTED.try_with(Cell::get).unwrap_or(false) {
        LIVE.fetch_add(bytes, Ordering::Relaxed);
    }
}

fn size(bytes: usize) -> isize {
    isize::try_from(bytes).unwrap_or(isize::MAX)
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the counter
// is a plain atomic and never affects the returned memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(size(layout.size()));
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(size(layout.size()));
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-size(layout.size()));
        // SAFETY: `ptr` came from `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(size(new_size) - size(layout.size()));
        // SAFETY: as for `dealloc`; `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Idle sockets opened by the test.
const SOCKETS: usize = 200;
/// The bound per idle authenticated connection, whole process.
const BOUND_PER_SOCKET: isize = 16 * 1024;

/// Runs the relay server on a thread (and runtime) of its own whose allocations are counted.
fn start_counted_server() -> (SocketAddr, Arc<Notify>, std::thread::JoinHandle<()>) {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let stop = Arc::new(Notify::new());
    let stopped = Arc::clone(&stop);
    let thread = std::thread::spawn(move || {
        COUNTED.set(true);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = Tokio::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
                .await
                .unwrap();
            addr_tx.send(listener.local_addr().unwrap()).unwrap();
            let config = Config {
                pow_difficulty: 0,
                registrations_per_hour_per_addr: u32::MAX,
                ..Config::default()
            };
            let server =
                RelayServer::in_memory(config, 7, MemoryStore::new(), MemoryBlobStore::new());
            server
                .serve::<Tokio>(listener, async move { stopped.notified().await })
                .await
                .unwrap();
        });
    });
    (addr_rx.recv().unwrap(), stop, thread)
}

#[tokio::test(flavor = "current_thread")]
async fn an_idle_authenticated_socket_costs_at_most_16_kib() {
    let (addr, stop, server) = start_counted_server();
    let from = FromAddr(Ipv4Addr::LOCALHOST);
    let mut accounts = Vec::new();
    for k in 0..SOCKETS {
        accounts.push(account(addr, from, u8::try_from(k + 1).unwrap()).await);
    }
    // Warm-up: the first socket allocates what is shared (runtime, router, tables' growth).
    let warm = connect(addr, &accounts[0]).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = LIVE.load(Ordering::Relaxed);
    let mut sockets = Vec::new();
    for a in &accounts[1..] {
        sockets.push(connect(addr, a).await);
    }
    // Let the relay process the upgrades and syncs (and the tickets' HTTP connections end).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = LIVE.load(Ordering::Relaxed);
    let per_socket = (after - before) / isize::try_from(sockets.len()).unwrap();
    eprintln!(
        "{} idle sockets: {} bytes of the relay's heap, {per_socket} per socket",
        sockets.len(),
        after - before
    );
    assert!(
        per_socket <= BOUND_PER_SOCKET,
        "an idle socket costs {per_socket} bytes (bound {BOUND_PER_SOCKET})"
    );
    drop(sockets);
    drop(warm);
    stop.notify_one();
    server.join().unwrap();
}
