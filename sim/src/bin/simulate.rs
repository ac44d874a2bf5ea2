//! `simulate`: runs the deterministic simulator over a range of seeds (or one seed with its
//! trace) and reports violations by oracle; every failing seed gets the command that replays it.
//!
//! ```text
//! cargo run --release -p sim --bin simulate -- --seeds 0..1000
//! cargo run --release -p sim --bin simulate -- --seed 17 --trace
//! ```

use std::collections::BTreeMap;
use std::ops::Range;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use sim::sim::faults::FaultSelection;
use sim::sim::{RunConfig, RunReport, run};

/// Deterministic fault-injection simulation of the relay and its clients.
///
/// Each seed draws a scenario (accounts, friendships, scripted traffic, second-device logins)
/// and a fault plan (swarm testing: a random subset of fault kinds), runs it on turmoil, heals
/// everything, lets it converge and checks the oracles. The same seed replays the same run.
#[derive(Debug, Parser)]
#[command(name = "simulate", version)]
struct Args {
    /// Seeds to run, as a half-open range `START..END` (e.g. `0..1000`).
    #[arg(long, value_parser = parse_range, conflicts_with = "seed")]
    seeds: Option<Range<u64>>,

    /// Runs one seed (prints its scenario and fault plan).
    #[arg(long)]
    seed: Option<u64>,

    /// With `--seed`: prints the application-level trace.
    #[arg(long, requires = "seed")]
    trace: bool,

    /// Client hosts per run.
    #[arg(long, default_value_t = 4)]
    clients: usize,

    /// Fault kinds: `swarm` (random subset per seed), `all`, `none`, or a comma-separated list
    /// of partition, oneway, hold, latency, relay-crash, client-crash.
    #[arg(long, default_value = "swarm")]
    faults: FaultSelection,

    /// Skips capturing logs (faster; disables the `canary-logs` oracle).
    #[arg(long)]
    no_log_capture: bool,
}

fn parse_range(s: &str) -> Result<Range<u64>, String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("expected START..END, got {s:?}"))?;
    let start = a.parse().map_err(|e| format!("start: {e}"))?;
    let end = b.parse().map_err(|e| format!("end: {e}"))?;
    if end <= start {
        return Err("empty range".into());
    }
    Ok(start..end)
}

fn faults_arg(f: &FaultSelection) -> String {
    match f {
        FaultSelection::Swarm => "swarm".into(),
        FaultSelection::Only(k) if k.is_empty() => "none".into(),
        FaultSelection::Only(k) => k.iter().map(|k| k.name()).collect::<Vec<_>>().join(","),
    }
}

fn replay(args: &Args, seed: u64) -> String {
    format!(
        "cargo run --release -p sim --bin simulate -- --seed {seed} --clients {} --faults {} --trace",
        args.clients,
        faults_arg(&args.faults)
    )
}

fn config(args: &Args, seed: u64) -> RunConfig {
    RunConfig {
        seed,
        clients: args.clients,
        faults: args.faults.clone(),
        capture_logs: !args.no_log_capture,
    }
}

fn main() -> anyhow::Result<ExitCode> {
    let args = Args::parse();
    if args.clients < 2 {
        bail!("--clients must be at least 2");
    }
    if let Some(seed) = args.seed {
        return one(&args, seed);
    }
    let seeds = args.seeds.clone().unwrap_or(0..100);
    sweep(&args, seeds)
}

fn one(args: &Args, seed: u64) -> anyhow::Result<ExitCode> {
    let report = run(&config(args, seed));
    println!("seed {seed}\n{}\n{}", report.scenario, report.plan);
    if args.trace {
        for line in &report.trace {
            println!("{line}");
        }
    }
    println!(
        "simulated {:.1} s, trace sha256 {}",
        report.simulated.as_secs_f64(),
        report.trace_hash
    );
    for v in &report.violations {
        println!("VIOLATION {v}");
    }
    Ok(if report.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        println!("replay: {}", replay(args, seed));
        ExitCode::FAILURE
    })
}

#[allow(
    clippy::disallowed_methods,
    reason = "wall time of the sweep, for the seeds-per-second summary only; never reaches a run"
)]
fn wall_clock() -> std::time::Instant {
    std::time::Instant::now()
}

fn sweep(args: &Args, seeds: Range<u64>) -> anyhow::Result<ExitCode> {
    let total = seeds.end - seeds.start;
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} seeds  {per_sec}  eta {eta}  {msg}")
            .context("progress template")?,
    );
    let started = wall_clock();
    let mut simulated = Duration::ZERO;
    let mut by_oracle: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut failing: Vec<RunReport> = Vec::new();
    for seed in seeds {
        let report = run(&config(args, seed));
        simulated += report.simulated;
        if !report.violations.is_empty() {
            for v in &report.violations {
                *by_oracle.entry(v.oracle).or_default() += 1;
            }
            bar.println(format!(
                "seed {seed}: {} violation(s), first: {}",
                report.violations.len(),
                report.violations[0]
            ));
            failing.push(report);
            bar.set_message(format!("{} failing", failing.len()));
        }
        bar.inc(1);
    }
    bar.finish();
    let wall = started.elapsed();
    println!("\nseeds run: {total}");
    println!("failing seeds: {}", failing.len());
    for (oracle, n) in &by_oracle {
        println!("  {oracle}: {n} violation(s)");
    }
    println!(
        "simulated {:.0} s in {:.1} s wall ({:.0}x), {:.2} seeds/s",
        simulated.as_secs_f64(),
        wall.as_secs_f64(),
        simulated.as_secs_f64() / wall.as_secs_f64().max(1e-9),
        total as f64 / wall.as_secs_f64().max(1e-9)
    );
    for r in &failing {
        println!("replay seed {}: {}", r.seed, replay(args, r.seed));
    }
    Ok(if failing.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
