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
use sim::sim::{RunConfig, run};

/// Deterministic fault-injection simulation of the relay and its clients.
///
/// Each seed draws a scenario (accounts, friendships, scripted traffic, second-device logins,
/// vanity purchases, channel trades and quota buys paid through the payment stand-in) and a
/// fault plan (swarm testing: a random subset of fault kinds), runs it on turmoil, heals
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
    /// of partition, oneway, hold, latency, relay-crash, client-crash, webhook.
    #[arg(long, default_value = "swarm")]
    faults: FaultSelection,

    /// Skips capturing logs (faster; disables the `canary-logs` oracle).
    #[arg(long)]
    no_log_capture: bool,

    /// Never binds a bought vanity alias (the buyer keeps its alias; orders stay unbound).
    #[arg(long)]
    no_bind: bool,

    /// With `--seed`: machine-readable output for the sweep's child processes.
    #[arg(long, hide = true, requires = "seed")]
    machine: bool,
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
        "cargo run --release -p sim --bin simulate -- --seed {seed} --clients {} --faults {}{} --trace",
        args.clients,
        faults_arg(&args.faults),
        if args.no_bind { " --no-bind" } else { "" }
    )
}

fn config(args: &Args, seed: u64) -> RunConfig {
    RunConfig {
        seed,
        clients: args.clients,
        faults: args.faults.clone(),
        capture_logs: !args.no_log_capture,
        bind_vanity: !args.no_bind,
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
    if args.machine {
        println!("SIM_MS\t{}", report.simulated.as_millis());
        println!("HASH\t{}", report.trace_hash);
        for v in &report.violations {
            println!(
                "VIOLATION\t{}\t{}",
                v.oracle,
                v.detail.replace(['\n', '\t'], " ")
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
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

/// What a child process reported for one seed.
struct ChildReport {
    simulated: Duration,
    violations: Vec<(String, String)>,
}

/// Runs one seed in a fresh process of this executable.
///
/// Why not in-process: runs in one process are deterministic *as a sequence* but a seed's
/// trace can depend on which runs came before it (process-global counters in the async
/// runtime stack, e.g. task ids, change the order in which a crashed host's sockets are
/// dropped). A fresh process per seed makes the sweep's result exactly what the printed
/// replay command reproduces.
fn child_run(exe: &std::path::Path, args: &Args, seed: u64) -> anyhow::Result<ChildReport> {
    let mut command = std::process::Command::new(exe);
    command.args([
        "--seed",
        &seed.to_string(),
        "--clients",
        &args.clients.to_string(),
        "--faults",
        &faults_arg(&args.faults),
        "--machine",
    ]);
    if args.no_log_capture {
        command.arg("--no-log-capture");
    }
    if args.no_bind {
        command.arg("--no-bind");
    }
    let output = command.output().context("running a seed")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut report = ChildReport {
        simulated: Duration::ZERO,
        violations: Vec::new(),
    };
    for line in stdout.lines() {
        let mut fields = line.splitn(3, '\t');
        match (fields.next(), fields.next(), fields.next()) {
            (Some("SIM_MS"), Some(ms), _) => {
                report.simulated = Duration::from_millis(ms.parse().unwrap_or(0));
            }
            (Some("VIOLATION"), Some(oracle), detail) => report
                .violations
                .push((oracle.to_owned(), detail.unwrap_or("").to_owned())),
            _ => {}
        }
    }
    if !output.status.success() {
        report.violations.push((
            "crash".to_owned(),
            format!(
                "process failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            ),
        ));
    }
    Ok(report)
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
    let mut by_oracle: BTreeMap<String, u64> = BTreeMap::new();
    let mut failing: Vec<u64> = Vec::new();
    let exe = std::env::current_exe().context("locating this executable")?;
    for seed in seeds {
        let child = child_run(&exe, args, seed)?;
        simulated += child.simulated;
        if !child.violations.is_empty() {
            for (oracle, _) in &child.violations {
                *by_oracle.entry(oracle.clone()).or_default() += 1;
            }
            bar.println(format!(
                "seed {seed}: {} violation(s), first: [{}] {}",
                child.violations.len(),
                child.violations[0].0,
                child.violations[0].1
            ));
            failing.push(seed);
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
    for seed in &failing {
        println!("replay seed {seed}: {}", replay(args, *seed));
    }
    Ok(if failing.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
