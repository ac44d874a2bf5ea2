//! End to end (issue 8 item 4): messages per second and p50/p99 latency through the real relay
//! (`sim::server::RelayServer`, memory store) over loopback WebSockets with 1 and 100 connected
//! pairs, next to the bare tokio-tungstenite echo (`benches::run_load`) measured in the same run
//! with the same frame size and the same number of closed loops; then simulator seeds per second
//! (the release `simulate` binary, if built).
//!
//! Not a criterion bench (per-message p99 is the point). Run with
//! `cargo bench -p benches --bench e2e`; build `simulate` first for the seeds/s rows
//! (`cargo build --release -p sim --bin simulate`). Without `--bench` (as `cargo test --benches`
//! runs it) it does a tiny smoke run only and skips the simulator.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use benches::relay_load::{
    BenchRelay, RelayLoadConfig, RelayLoadReport, msg_frame_len, run_relay_load,
};
use benches::{LoadConfig, LoadReport, MachineInfo, run_load, spawn_echo_server, wall_now};

/// Plaintext bytes of each message (encrypted with AES-256-GCM, ~460 B `msg` frame).
const PLAINTEXT_BYTES: usize = 200;
/// The recipient sends one `delivered` per this many messages.
const RECEIPT_BATCH: usize = 50;
/// Hard bound of each load run (setup excluded).
const RUN_DEADLINE: Duration = Duration::from_secs(90);
/// Hard bound of each simulator sweep.
const SIM_DEADLINE: Duration = Duration::from_secs(600);
/// Seeds per simulator sweep.
const SIM_SEEDS: &str = "0..10";

struct Scenario {
    pairs: usize,
    warmup: usize,
    per_pair: usize,
}

fn scenarios(full: bool) -> Vec<Scenario> {
    if full {
        vec![
            Scenario {
                pairs: 1,
                warmup: 500,
                per_pair: 10_000,
            },
            Scenario {
                pairs: 100,
                warmup: 10,
                per_pair: 200,
            },
        ]
    } else {
        vec![
            Scenario {
                pairs: 1,
                warmup: 1,
                per_pair: 5,
            },
            Scenario {
                pairs: 3,
                warmup: 1,
                per_pair: 2,
            },
        ]
    }
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn print_relay(r: &RelayLoadReport) {
    println!(
        "| relay, {:>3} pair(s){:<6} | {:>8} | {:>9.0} | {:>9.1} | {:>9.1} | {:>9.1} | {:>9.1} |",
        r.pairs,
        "",
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
    let cfg = RelayLoadConfig {
        warmup_msgs_per_pair: s.warmup,
        msgs_per_pair: s.per_pair,
        plaintext_bytes: PLAINTEXT_BYTES,
        receipt_batch: RECEIPT_BATCH,
        deadline: RUN_DEADLINE,
    };
    let report = run_relay_load(relay, pairs, &cfg).await?;
    // The echo right after, same process and runtime, same frame size, same closed loops.
    let echo = spawn_echo_server().await?;
    let echo_report = run_load(
        &echo.url(),
        &LoadConfig {
            connections: s.pairs,
            warmup_round_trips: s.warmup,
            round_trips_per_connection: s.per_pair,
            frame_bytes,
            deadline: RUN_DEADLINE,
        },
    )
    .await?;
    print_relay(&report);
    print_echo(s.pairs, &echo_report);
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
    Ok(())
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

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // cargo passes `--bench` when benchmarking; `cargo test --benches` does not.
    let full = std::env::args().any(|a| a == "--bench");
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
    rt.block_on(async {
        let mut relay = BenchRelay::start().await?;
        for s in scenarios(full) {
            one(&mut relay, &s).await?;
        }
        relay.stop().await;
        Ok::<(), Box<dyn std::error::Error>>(())
    })?;
    if !full {
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
