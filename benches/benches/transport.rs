//! Transport ceiling: a bare tokio-tungstenite echo server on loopback,
//! driven by the reusable load generator of `benches::run_load` with 1 and with 100 concurrent
//! connections. Prints round trips per second and p50/p99 latency of a ~200-byte text frame.
//!
//! Not a criterion bench: criterion reports means and medians of batches, not per-request p99.
//! Run with `cargo bench -p benches --bench transport`. Without `--bench` (as `cargo test
//! --benches` runs it) it does a tiny smoke run only.
//!
//! The relay end-to-end bench will call the same `run_load` with the relay's URL, in the same run.

use std::time::Duration;

use benches::{LoadConfig, LoadReport, MachineInfo, run_load, spawn_echo_server};

/// Frame size of the round trip, close to a small encrypted chat message.
const FRAME_BYTES: usize = 200;
/// Hard bound of each load run, connecting included.
const RUN_DEADLINE: Duration = Duration::from_secs(60);

struct Scenario {
    name: &'static str,
    cfg: LoadConfig,
}

fn scenarios(full: bool) -> Vec<Scenario> {
    let (single, per_conn, warmup_single, warmup_multi) = if full {
        (50_000, 500, 2_000, 50)
    } else {
        (20, 2, 2, 1)
    };
    vec![
        Scenario {
            name: "echo, 1 connection",
            cfg: LoadConfig {
                connections: 1,
                warmup_round_trips: warmup_single,
                round_trips_per_connection: single,
                frame_bytes: FRAME_BYTES,
                deadline: RUN_DEADLINE,
            },
        },
        Scenario {
            name: "echo, 100 connections",
            cfg: LoadConfig {
                connections: 100,
                warmup_round_trips: warmup_multi,
                round_trips_per_connection: per_conn,
                frame_bytes: FRAME_BYTES,
                deadline: RUN_DEADLINE,
            },
        },
    ]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn print_row(name: &str, r: &LoadReport) {
    println!(
        "| {name:<24} | {:>11} | {:>10.0} | {:>8.1} | {:>8.1} |",
        r.round_trips,
        r.round_trips_per_sec(),
        micros(r.latency_quantile(0.50)),
        micros(r.latency_quantile(0.99)),
    );
}

fn main() {
    // cargo passes `--bench` when benchmarking; `cargo test --benches` does not.
    let full = std::env::args().any(|a| a == "--bench");
    println!("{}", MachineInfo::detect());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("build the tokio runtime");
    println!(
        "\n| {:<24} | {:>11} | {:>10} | {:>8} | {:>8} |",
        "scenario (200 B text)", "round trips", "rt/s", "p50 us", "p99 us"
    );
    println!(
        "|{:-<26}|{:-<13}|{:-<12}|{:-<10}|{:-<10}|",
        "", "", "", "", ""
    );
    rt.block_on(async {
        let server = spawn_echo_server()
            .await
            .expect("bind the loopback echo server");
        for s in scenarios(full) {
            match run_load(&server.url(), &s.cfg).await {
                Ok(report) => print_row(s.name, &report),
                Err(e) => {
                    eprintln!("{}: {e}", s.name);
                    std::process::exit(1);
                }
            }
        }
    });
}
