//! End to end (issues 8 and 11): messages per second and p50/p99 latency through the real relay
//! over loopback WebSockets with 1 and 100 connected pairs, next to a bare tokio-tungstenite
//! echo measured in the same run with the same frame size and the same number of closed loops;
//! then simulator seeds per second (the release `simulate` binary, if built).
//!
//! Measured as an outsider: the release `relay` binary runs as a child process, once on the
//! memory store (`--memory`), once on the durable SQLite store (`--data`, WAL,
//! `synchronous=FULL`) and, when `RELAY_BENCH_POSTGRES_URL` names a database, once on
//! PostgreSQL (`--postgres URL`, a fresh schema `bench_<pid>`; e.g. a cluster from
//! `PG_TEST_DURABLE=1 relay-pg/scripts/pg-test-cluster.sh start DIR`, whose URL it prints as
//! `RELAY_TEST_POSTGRES_URL`), with production limits except those a load must lift (PoW difficulty
//! 1; messages and frames per minute unlimited); the echo server runs as a child process too
//! (this bench's own executable with `--echo-server`). The load generator is this process, on a
//! 2-worker tokio runtime, so every row shares the same two cores the same way.
//!
//! A 100-pair row keeps 8 messages in flight per sender (relay only: the echo is a closed
//! loop), the load where pipelined commits have batches to overlap. A last closed-loop row runs
//! 10,000 pairs on SQLite (fewer when the open-file limit cannot hold 40,000 sockets across
//! this process and the relay; it says so), with the relay's resident set after it and the
//! echo at as many connections: the generator's own ceiling at that size. `-- --large-only`
//! runs only that row; `-- --small-only` every row but that one, and no simulator sweep (a
//! quicker before/after of a change to the relay); `-- --store NAME` (`memory`, `sqlite` or
//! `pg`) only that store's rows; `-- --relay-addr HOST:PORT` measures the relay serving there
//! instead (e.g. a cluster's load balancer, `deploy/cluster/loopback.sh` with the bench's
//! limits in `RELAY_ARGS`): the relay rows only, without the echo and the CPU shares.
//!
//! Each relay row also says how much CPU the relay process used (`/proc/<pid>/stat`), in cores
//! and per message (the load-robust figure: CPU time over every message of the run, warm-up
//! included), what share of the run each of its core tasks was busy
//! (`relay_core_busy_seconds_total`, by shard, scraped from the relay's `--metrics-listen`):
//! whether the tasks that own the state were the ceiling, and how many messages and rows each
//! store commit carried, and how long it took (`relay_store_commit_*`). The relay reads
//! `RELAY_SHARDS` from the environment: `RELAY_SHARDS=K` runs it with K cores.
//!
//! Not a criterion bench (per-message p99 is the point). Run with
//! `cargo build --release -p relay-server --bin relay --bin simulate && cargo bench -p benches --bench e2e`.
//! Without the release `relay` it measures the relay in process (memory store) instead. Without
//! `--bench` (as `cargo test --benches` runs it) it does a tiny in-process smoke run only.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use benches::relay_load::{
    BenchRelay, RelayLoadConfig, RelayLoadReport, msg_frame_len, run_relay_load,
};
use benches::relay_process::{RelayProcess, relay_binary};
use benches::{LoadConfig, LoadReport, MachineInfo, run_load, spawn_echo_server, wall_now};

/// The database of the PostgreSQL row (skipped when unset).
const POSTGRES_URL_ENV: &str = "RELAY_BENCH_POSTGRES_URL";
/// Plaintext bytes of each message (encrypted with AES-256-GCM, ~460 B `msg` frame).
const PLAINTEXT_BYTES: usize = 200;
/// The recipient sends one `delivered` per this many messages.
const RECEIPT_BATCH: usize = 50;
/// Hard bound of each load run (setup excluded; see [`Scenario::deadline`]).
const RUN_DEADLINE: Duration = Duration::from_secs(90);
/// Hard bound of each simulator sweep.
const SIM_DEADLINE: Duration = Duration::from_secs(600);
/// Messages each sender keeps unacknowledged in the windowed 100-pair row.
const WINDOW_IN_FLIGHT: usize = 8;
/// Seeds per simulator sweep.
const SIM_SEEDS: &str = "0..10";

struct Scenario {
    pairs: usize,
    /// Only on this store (the large row), else on every store.
    store_only: Option<&'static str>,
    warmup: usize,
    per_pair: usize,
    /// Messages each sender keeps unacknowledged (1: the closed loop the echo is compared
    /// with; more: a relay-only row, where pipelined commits have batches to overlap).
    in_flight: usize,
}

/// Slowest rate at which a run still counts as running, for [`Scenario::deadline`].
const SLOWEST_MSGS_PER_SEC: usize = 1_000;

impl Scenario {
    /// [`RUN_DEADLINE`], or longer for a run too large to finish in it at
    /// [`SLOWEST_MSGS_PER_SEC`].
    fn deadline(&self) -> Duration {
        let msgs = self.pairs * (self.warmup + self.per_pair);
        RUN_DEADLINE.max(Duration::from_secs((msgs / SLOWEST_MSGS_PER_SEC) as u64))
    }

    /// The load this scenario runs.
    fn load(&self) -> RelayLoadConfig {
        RelayLoadConfig {
            warmup_msgs_per_pair: self.warmup,
            msgs_per_pair: self.per_pair,
            plaintext_bytes: PLAINTEXT_BYTES,
            receipt_batch: RECEIPT_BATCH,
            deadline: self.deadline(),
            in_flight_per_pair: self.in_flight,
        }
    }
}

fn scenarios(full: bool) -> Vec<Scenario> {
    if full {
        vec![
            Scenario {
                pairs: 1,
                store_only: None,
                warmup: 500,
                per_pair: 10_000,
                in_flight: 1,
            },
            Scenario {
                pairs: 100,
                store_only: None,
                warmup: 10,
                per_pair: 200,
                in_flight: 1,
            },
            Scenario {
                pairs: 100,
                store_only: None,
                warmup: 10,
                per_pair: 400,
                in_flight: WINDOW_IN_FLIGHT,
            },
            Scenario {
                pairs: large_pairs(),
                store_only: Some("sqlite"),
                warmup: 2,
                per_pair: 20,
                in_flight: 1,
            },
        ]
    } else {
        vec![
            Scenario {
                pairs: 1,
                store_only: None,
                warmup: 1,
                per_pair: 5,
                in_flight: 1,
            },
            Scenario {
                pairs: 3,
                store_only: None,
                warmup: 1,
                per_pair: 2,
                in_flight: 1,
            },
            Scenario {
                pairs: 3,
                store_only: None,
                warmup: 1,
                per_pair: 4,
                in_flight: 2,
            },
        ]
    }
}

/// Pairs of the large closed-loop row (SQLite only), if the open-file limit allows.
const LARGE_PAIRS: usize = 10_000;
/// Open files kept aside for everything but the sockets of the large row.
const FILE_MARGIN: usize = 1_000;

/// [`LARGE_PAIRS`], or fewer when the soft open-file limit cannot hold their sockets: each pair
/// is two sockets in this process and two in the relay (a child: same limit), then one in the
/// echo's closed loops.
fn large_pairs() -> usize {
    let limit = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|l| open_files_limit(&l));
    match limit {
        Some(limit) if limit < 2 * LARGE_PAIRS + FILE_MARGIN => {
            let fits = limit.saturating_sub(FILE_MARGIN) / 2;
            println!(
                "(large row: {fits} pairs, not {LARGE_PAIRS}: the open-file limit is {limit}; \
                 raise `ulimit -n` to {} for the full row)",
                2 * LARGE_PAIRS + FILE_MARGIN
            );
            fits
        }
        _ => LARGE_PAIRS,
    }
}

/// The soft "Max open files" of a `/proc/<pid>/limits` text.
fn open_files_limit(limits: &str) -> Option<usize> {
    limits
        .lines()
        .find(|l| l.starts_with("Max open files"))?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn print_relay(r: &RelayLoadReport) {
    print_relay_row(&format!("relay, {:>3} pair(s)", r.pairs), r);
}

/// A relay row with several messages in flight per sender (no echo row: the echo is a closed
/// loop).
fn print_windowed(r: &RelayLoadReport, in_flight: usize) {
    print_relay_row(
        &format!("relay, {:>3} pair(s) x{in_flight:<2} in flight", r.pairs),
        r,
    );
}

fn print_relay_row(label: &str, r: &RelayLoadReport) {
    println!(
        "| {label:<25} | {:>8} | {:>9.0} | {:>9.1} | {:>9.1} | {:>9.1} | {:>9.1} |",
        r.messages,
        r.msgs_per_sec(),
        micros(r.delivery_quantile(0.50)),
        micros(r.delivery_quantile(0.99)),
        micros(r.ack_quantile(0.50)),
        micros(r.ack_quantile(0.99)),
    );
}

fn print_echo(conns: usize, r: &LoadReport) {
    println!(
        "| echo,  {conns:>3} connection(s) | {:>8} | {:>9.0} | {:>9} | {:>9} | {:>9.1} | {:>9.1} |",
        r.round_trips,
        r.round_trips_per_sec(),
        "",
        "",
        micros(r.latency_quantile(0.50)),
        micros(r.latency_quantile(0.99)),
    );
}

async fn one(relay: &mut BenchRelay, s: &Scenario) -> Result<(), Box<dyn std::error::Error>> {
    if s.store_only.is_some() {
        return Ok(());
    }
    let setup = wall_now();
    let pairs = relay.pairs(s.pairs).await?;
    let frame_bytes = pairs
        .first()
        .map_or(PLAINTEXT_BYTES, |p| msg_frame_len(p, PLAINTEXT_BYTES));
    eprintln!(
        "setup of {} pair(s) (2 accounts over HTTP + 2 sockets per pair): {:.2} s",
        s.pairs,
        setup.elapsed().as_secs_f64()
    );
    let cfg = s.load();
    let report = run_relay_load(relay, pairs, &cfg).await?;
    if s.in_flight > 1 {
        print_windowed(&report, s.in_flight);
        return Ok(());
    }
    // The echo right after, same process and runtime, same frame size, same closed loops.
    let echo = spawn_echo_server().await?;
    let echo_report = run_load(
        &echo.url(),
        &LoadConfig {
            connections: s.pairs,
            warmup_round_trips: s.warmup,
            round_trips_per_connection: s.per_pair,
            frame_bytes,
            deadline: s.deadline(),
        },
    )
    .await?;
    print_relay(&report);
    print_echo(s.pairs, &echo_report);
    print_ratio(&report, &echo_report);
    Ok(())
}

/// A fresh directory for the SQLite relay's data (under the system's temp dir).
fn tempfile_dir() -> Result<String, Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("e2e-relay-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir.to_string_lossy().into_owned())
}

fn print_ratio(report: &RelayLoadReport, echo_report: &LoadReport) {
    let rate = report.msgs_per_sec() / echo_report.round_trips_per_sec().max(f64::MIN_POSITIVE);
    let p99 = report.delivery_quantile(0.99).as_secs_f64()
        / echo_report
            .latency_quantile(0.99)
            .as_secs_f64()
            .max(f64::MIN_POSITIVE);
    println!(
        "|   relay / echo ({} B frame) | | {rate:>8.2}x | | {p99:>8.2}x (one-way p99 / echo rt p99) | | |",
        report.frame_bytes
    );
}

/// `target/release/simulate`, next to this bench's `target/release/deps/e2e-*`.
fn simulate_path() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let path = exe.parent()?.parent()?.join("simulate");
    path.exists().then_some(path)
}

/// Runs `simulate --seeds SIM_SEEDS --faults <faults>` and prints seeds/s (bounded).
fn simulate(path: &PathBuf, faults: &str) -> Result<(), Box<dyn std::error::Error>> {
    let args = ["--seeds", SIM_SEEDS, "--faults", faults];
    let t0 = wall_now();
    let mut child = Command::new(path)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if t0.elapsed() > SIM_DEADLINE {
            child.kill()?;
            let _ = child.wait();
            return Err(format!("simulate {args:?} exceeded {SIM_DEADLINE:?}").into());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let wall = t0.elapsed().as_secs_f64();
    let out = child.wait_with_output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (a, b) = SIM_SEEDS
        .split_once("..")
        .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)))
        .ok_or("bad seed range")?;
    let seeds = b.saturating_sub(a);
    println!(
        "| simulate --seeds {SIM_SEEDS} --faults {faults:<5} | {seeds} seeds | {wall:>6.2} s | {:>6.2} seeds/s | exit {} |",
        seeds as f64 / wall,
        status.code().unwrap_or(-1)
    );
    for line in stdout
        .lines()
        .rev()
        .take(3)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
    {
        println!("    {line}");
    }
    Ok(())
}

/// `--echo-server`: serves the echo on `127.0.0.1:0` (a 2-worker runtime, like the relay's on
/// this machine), prints `ECHO <addr>` and runs until killed.
fn echo_server() -> Result<(), Box<dyn std::error::Error>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let echo = spawn_echo_server().await?;
        println!("ECHO {}", echo.url());
        std::future::pending::<()>().await;
        Ok::<(), Box<dyn std::error::Error>>(())
    })
}

/// A child process running [`echo_server`]; killed when dropped.
struct EchoProcess {
    child: std::process::Child,
    url: String,
}

impl EchoProcess {
    fn spawn() -> Result<Self, Box<dyn std::error::Error>> {
        use std::io::BufRead as _;
        let mut child = Command::new(std::env::current_exe()?)
            .arg("--echo-server")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut line = String::new();
        std::io::BufReader::new(stdout).read_line(&mut line)?;
        let url = line
            .strip_prefix("ECHO ")
            .ok_or_else(|| format!("echo server said {line:?}"))?
            .trim()
            .to_owned();
        Ok(Self { child, url })
    }
}

impl Drop for EchoProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The relay binary's arguments for a load: production limits but those a load must lift.
const RELAY_LOAD_ARGS: [&str; 10] = [
    "--pow-difficulty",
    "1",
    "--msgs-per-min-per-user",
    "4294967295",
    "--frames-per-min-per-conn",
    "4294967295",
    "--frame-burst-per-conn",
    "4294967295",
    "--log",
    "warn",
];

/// `--relay-addr HOST:PORT`: measure the relay that serves there instead of starting one. It
/// must run with the bench's limits (`RELAY_LOAD_ARGS`).
fn relay_addr(args: &[String]) -> Result<Option<SocketAddr>, Box<dyn std::error::Error>> {
    let Some(i) = args.iter().position(|a| a == "--relay-addr") else {
        return Ok(None);
    };
    let addr = args.get(i + 1).ok_or("--relay-addr needs HOST:PORT")?;
    Ok(Some(
        addr.parse()
            .map_err(|e| format!("--relay-addr {addr}: {e}"))?,
    ))
}

/// One scenario against a relay at another's address: its loads and latencies only.
async fn one_external(
    bench: &mut BenchRelay,
    s: &Scenario,
) -> Result<(), Box<dyn std::error::Error>> {
    let setup = wall_now();
    let pairs = bench.pairs(s.pairs).await?;
    eprintln!(
        "external: setup of {} pair(s): {:.2} s",
        s.pairs,
        setup.elapsed().as_secs_f64()
    );
    let cfg = s.load();
    let report = run_relay_load(bench, pairs, &cfg).await?;
    if s.in_flight > 1 {
        print_windowed(&report, s.in_flight);
    } else {
        print_relay(&report);
    }
    Ok(())
}

async fn one_process(
    store: &str,
    relay: &RelayProcess,
    bench: &mut BenchRelay,
    echo: &EchoProcess,
    s: &Scenario,
) -> Result<(), Box<dyn std::error::Error>> {
    if s.store_only.is_some_and(|only| only != store) {
        return Ok(());
    }
    let setup = wall_now();
    let pairs = bench.pairs(s.pairs).await?;
    eprintln!(
        "{store}: setup of {} pair(s) (2 accounts over HTTP + 2 sockets per pair): {:.2} s",
        s.pairs,
        setup.elapsed().as_secs_f64()
    );
    let frame_bytes = pairs
        .first()
        .map_or(PLAINTEXT_BYTES, |p| msg_frame_len(p, PLAINTEXT_BYTES));
    let cfg = s.load();
    let before = relay.usage()?;
    let ran = wall_now();
    let report = run_relay_load(bench, pairs, &cfg).await?;
    let elapsed = ran.elapsed().as_secs_f64();
    let after = relay.usage()?;
    let (cores, busy) = after.shares_since(&before, elapsed);
    let busy = if busy.is_empty() {
        "(not exported)".to_owned()
    } else {
        let each: Vec<String> = busy.iter().map(|b| format!("{:.0} %", b * 100.0)).collect();
        each.join(" + ")
    };
    // Every message of the run, warm-up included, as the CPU time is.
    let sent = report.messages + s.pairs * s.warmup;
    let per_msg = cores * elapsed * 1e6 / sent.max(1) as f64;
    let commits = after
        .commits_since(&before)
        .map_or(String::new(), |(count, mean, rows)| {
            format!(
                "; {:.1} messages and {:.1} rows per store commit, {:.2} ms each",
                sent as f64 / count.max(1.0),
                rows / count.max(1.0),
                mean * 1e3
            )
        });
    let usage = format!(
        "|   relay process (warm-up included): {cores:.2} cores of CPU, {per_msg:.1} µs of CPU per message, its core tasks busy {busy} of the time{commits}"
    );
    if s.in_flight > 1 {
        println!("| {store:<6} store, relay process:");
        print_windowed(&report, s.in_flight);
        println!("{usage}");
        return Ok(());
    }
    let echo_report = run_load(
        &echo.url,
        &LoadConfig {
            connections: s.pairs,
            warmup_round_trips: s.warmup,
            round_trips_per_connection: s.per_pair,
            frame_bytes,
            deadline: s.deadline(),
        },
    )
    .await?;
    println!("| {store:<6} store, relay process:");
    print_relay(&report);
    print_echo(s.pairs, &echo_report);
    print_ratio(&report, &echo_report);
    println!("{usage}");
    if s.store_only.is_some() {
        println!(
            "| {store:<6} relay's resident set after {} pairs: {:.0} MiB",
            s.pairs,
            relay.rss_bytes()? as f64 / (1024.0 * 1024.0)
        );
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().any(|a| a == "--echo-server") {
        return echo_server();
    }
    // cargo passes `--bench` when benchmarking; `cargo test --benches` does not.
    let full = std::env::args().any(|a| a == "--bench");
    let large_only = std::env::args().any(|a| a == "--large-only");
    let small_only = std::env::args().any(|a| a == "--small-only");
    let args: Vec<String> = std::env::args().collect();
    let only_store = args
        .iter()
        .position(|a| a == "--store")
        .map(|i| args.get(i + 1).cloned().ok_or("--store needs a name"))
        .transpose()?;
    println!("{}", MachineInfo::detect());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    println!(
        "\n| {:<27} | {:>8} | {:>9} | {:>9} | {:>9} | {:>9} | {:>9} |",
        "scenario", "msgs", "msgs/s", "1-way p50", "1-way p99", "ack/rt p50", "ack/rt p99"
    );
    println!(
        "|{:-<29}|{:-<10}|{:-<11}|{:-<11}|{:-<11}|{:-<11}|{:-<11}|",
        "", "", "", "", "", "", ""
    );
    let list: Vec<Scenario> = scenarios(full)
        .into_iter()
        .filter(|s| !large_only || s.store_only.is_some())
        .filter(|s| !small_only || s.store_only.is_none())
        .collect();
    if let Some(addr) = relay_addr(&args)? {
        // A relay someone else started (e.g. a cluster's load balancer): the same loads, no
        // echo and no CPU shares (its processes are not this bench's).
        return rt.block_on(async {
            let mut bench = BenchRelay::external(addr)?;
            for s in list.iter().filter(|s| s.store_only.is_none()) {
                one_external(&mut bench, s).await?;
            }
            Ok(())
        });
    }
    match relay_binary().filter(|_| full) {
        Some(binary) => {
            let echo = EchoProcess::spawn()?;
            let data = tempfile_dir()?;
            let mut stores = vec![
                ("memory", vec!["--memory".to_owned()]),
                ("sqlite", vec!["--data".to_owned(), data.clone()]),
            ];
            match std::env::var(POSTGRES_URL_ENV) {
                Ok(url) if !url.is_empty() => stores.push((
                    "pg",
                    vec![
                        "--postgres".to_owned(),
                        url,
                        "--pg-schema".to_owned(),
                        format!("bench_{}", std::process::id()),
                        "--secrets-dir".to_owned(),
                        format!("{data}/pg-secrets"),
                    ],
                )),
                _ => println!(
                    "(PostgreSQL row skipped: set {POSTGRES_URL_ENV} to a database URL to measure it)"
                ),
            }
            if let Some(only) = &only_store
                && !stores.iter().any(|(name, _)| name == only)
            {
                return Err(format!("--store {only}: not one of the stores measured here").into());
            }
            let stores = stores
                .into_iter()
                .filter(|(name, _)| only_store.as_ref().is_none_or(|only| only == name));
            for (store, args) in stores {
                let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
                all.extend(RELAY_LOAD_ARGS);
                let mut relay = RelayProcess::spawn(&binary, &all)?;
                relay.wait_ready()?;
                rt.block_on(async {
                    // One load generator per relay process: its accounts are numbered on
                    // from scenario to scenario (the relay keeps those it registered).
                    let mut bench = BenchRelay::external(relay.addr)?;
                    for s in &list {
                        one_process(store, &relay, &mut bench, &echo, s).await?;
                    }
                    Ok::<(), Box<dyn std::error::Error>>(())
                })?;
            }
            let _ = std::fs::remove_dir_all(&data);
        }
        None => {
            if full {
                println!(
                    "(release relay not built: `cargo build --release -p relay-server --bin relay`; \
                     measuring the relay in process, memory store)"
                );
            }
            rt.block_on(async {
                let mut relay = BenchRelay::start().await?;
                for s in &list {
                    one(&mut relay, s).await?;
                }
                relay.stop().await;
                Ok::<(), Box<dyn std::error::Error>>(())
            })?;
        }
    }
    if !full || large_only || small_only {
        return Ok(());
    }
    println!();
    match simulate_path() {
        Some(path) => {
            for faults in ["none", "all"] {
                simulate(&path, faults)?;
            }
        }
        None => println!(
            "simulate not built: `cargo build --release -p sim --bin simulate` for the seeds/s rows"
        ),
    }
    Ok(())
}
