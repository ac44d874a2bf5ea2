//! `simulate`: runs the deterministic simulator over a range of seeds (or one seed with its
//! trace, or a replay file), reports violations by oracle, and shrinks a failing seed to a
//! small replayable one; every failing seed gets the command that replays it.
//!
//! ```text
//! cargo run --release -p sim --bin simulate -- --seeds 0..1000 --scale medium -j 2
//! cargo run --release -p sim --bin simulate -- --seeds 0..1000000 --shard 3/16 --json s3.json --junit s3.xml
//! cargo run --release -p sim --bin simulate -- --seeds 0..1000000 --time-budget 600
//! cargo run --release -p sim --bin simulate -- --seed 17 --trace
//! cargo run --release -p sim --bin simulate -- --seed 17 --shrink --out seed17.json
//! cargo run --release -p sim --bin simulate -- --replay seed17.json --trace
//! # with a known bug planted (test builds only), to see which seeds catch it:
//! cargo run --release -p sim --features planted-bugs --bin simulate -- --plant seq-not-persisted --seeds 0..40
//! # Jepsen mode: real sockets, a relay process the harness starts, kills and pauses:
//! simulate --relay-cmd 'target/release/relay --listen {listen} --data {data} --pow-difficulty 0' --seeds 0..20 --history-dir h/
//! simulate --relay-url http://127.0.0.1:8080 --seed 3 --history h3.json
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use sim::faults::{FaultSelection, StoreChoice};
use sim::jepsen::{self, JepsenConfig, JepsenReport, RelayTarget};
use sim::scenario::Scale;
use sim::shrink::{ShrinkOptions, shrink, size};
use sim::{Replay, RunConfig, RunReport, run};

/// Deterministic fault-injection simulation of the relay and its clients.
///
/// Each seed draws a scenario (accounts, friendships, scripted traffic with bursts and
/// offline spells, second-device logins, media, calls, friend requests to raw clients that
/// reject them, vanity purchases, channel trades and quota buys paid through the payment
/// stand-in) and a fault plan (swarm testing: a random subset of fault kinds), runs it on
/// turmoil, heals everything, lets it converge and checks the oracles. The same seed replays
/// the same run; a scenario and plan can also be read from a replay file.
#[derive(Debug, Parser)]
#[command(name = "simulate", version)]
#[allow(clippy::struct_excessive_bools, reason = "CLI flags")]
struct Args {
    /// Seeds to run, as a half-open range `START..END` (e.g. `0..1000`).
    #[arg(long, value_parser = parse_range, conflicts_with_all = ["seed", "replay"])]
    seeds: Option<Range<u64>>,

    /// Runs one seed (prints its scenario and fault plan).
    #[arg(long, conflicts_with = "replay")]
    seed: Option<u64>,

    /// Runs the scenario and fault plan of a replay file (written by `--shrink`).
    #[arg(long, value_name = "FILE")]
    replay: Option<PathBuf>,

    /// With `--seed` or `--replay`: prints the application-level trace.
    #[arg(long)]
    trace: bool,

    /// World size: `small` (3-5 clients, CI), `medium` (6-24 clients, backlogs of thousands
    /// for a hub), `large` (40-200 clients, several per host).
    #[arg(long, default_value = "small")]
    scale: Scale,

    /// Client accounts per run (default: drawn from the scale; 4 at the small scale).
    #[arg(long)]
    clients: Option<usize>,

    /// Fault kinds: `swarm` (random subset per seed), `all`, `none`, or a comma-separated
    /// list of partition, oneway, hold, latency, relay-crash, client-crash, webhook,
    /// commit-fail, commit-slow, commit-crash, batch-crash, slow-consumer, storm,
    /// clock-skew, abuse, dishonest, failover (two relays on one store behind a load
    /// balancer; the active one freezes or dies and the standby takes over).
    #[arg(long, default_value = "swarm")]
    faults: FaultSelection,

    /// The relay's store: `drawn` (SQLite in about a third of the seeds), `memory`, `sqlite`.
    #[arg(long, default_value = "drawn")]
    store: StoreChoice,

    /// Skips scanning logs (faster; disables the `canary-logs` oracle).
    #[arg(long)]
    no_log_capture: bool,

    /// With `--seed` or `--replay`: prints the run's logs to stderr with this `tracing`
    /// filter (e.g. `debug`, `relay_server=trace,relay_core=debug`) instead of scanning them.
    #[arg(long, value_name = "FILTER")]
    log: Option<String>,

    /// Never binds a bought vanity alias (the buyer keeps its alias; orders stay unbound).
    #[arg(long)]
    no_bind: bool,

    /// With `--seed` or `--replay`: if it fails, shrinks it to a smaller run that fails the
    /// same oracle and writes it as a replay file.
    #[arg(long)]
    shrink: bool,

    /// Most runs `--shrink` spends.
    #[arg(long, default_value_t = 200, requires = "shrink")]
    shrink_runs: u32,

    /// Where `--shrink` writes the replay file (default `shrunk-seed-<N>.json`).
    #[arg(long, value_name = "FILE", requires = "shrink")]
    out: Option<PathBuf>,

    /// Runs only the seeds of shard `I` of `N` (1-based; seed `s` belongs to shard
    /// `(s - START) % N + 1`), like `cargo nextest --partition count:I/N`.
    #[arg(long, value_parser = parse_shard)]
    shard: Option<(u64, u64)>,

    /// Stops handing out seeds after this many seconds of wall time ("as many as fit").
    #[arg(long, value_name = "SECONDS")]
    time_budget: Option<u64>,

    /// Seeds run in parallel (threads; default: the available cores).
    #[arg(short = 'j', long)]
    jobs: Option<usize>,

    /// Writes the sweep's results as JSON (Jepsen mode: each seed's verdict, counts, routes, violations).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,

    /// Writes the sweep's results as JUnit XML (one test case per seed; Jepsen mode: `setup` is an error).
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,

    /// With `--seed`: machine-readable output (`SIM_MS`, `HASH`, `VIOLATION` lines).
    #[arg(long, hide = true)]
    machine: bool,

    /// Plants one known bug in the relay (test builds only: feature `planted-bugs`), to see
    /// which seeds catch it: ack-without-commit, receipt-clears-beyond-seq, no-message-dedup,
    /// sync-stops-at-empty-conversation, seq-not-persisted, sync-ignores-window,
    /// no-write-deadline, no-push-delivery, unfenced-store.
    #[cfg(feature = "planted-bugs")]
    #[arg(long, value_name = "BUG")]
    plant: Option<sim::planted::Planted>,

    /// Jepsen mode: runs the scenario on real sockets (127.0.0.1) against a relay process
    /// started from this command (run by `sh -c` in a process group of its own, so `exec` is
    /// optional; `{listen}` becomes its `IP:PORT`, `{data}` its data directory, kept across
    /// restarts, `{payment_secret}` the webhook secret), through a fault proxy, with kill -9
    /// and restart and SIGSTOP/SIGCONT of the process. Not bit-deterministic: the seed fixes
    /// the scenario and the plan, not the timing. Exit 3 when a seed's scenario did not
    /// happen (verdict `setup`). See README "Testing another relay implementation".
    #[arg(long, value_name = "CMD", conflicts_with_all = ["replay", "relay_url"])]
    relay_cmd: Option<String>,

    /// Jepsen mode against a relay someone else runs (no process faults).
    #[arg(long, value_name = "URL", conflicts_with = "replay")]
    relay_url: Option<String>,

    /// Jepsen mode: writes the run's report with its full history (JSON) here (`--seed`).
    #[arg(long, value_name = "FILE")]
    history: Option<PathBuf>,

    /// Jepsen mode: writes each seed's report and history as `seed-N.json` into this directory.
    #[arg(long, value_name = "DIR")]
    history_dir: Option<PathBuf>,

    /// Jepsen mode: the proxy toxics the plan draws from (comma list; `none` for no proxy
    /// faults). Default: latency,bandwidth,slicer,reset_peer,hold.
    #[arg(long, value_name = "TOXICS")]
    proxy_toxics: Option<String>,

    /// Jepsen mode: no kill -9 / SIGSTOP of the relay process.
    #[arg(long)]
    no_process_faults: bool,

    /// Jepsen mode: the relay's payment webhook secret, for commerce (vanity purchases paid
    /// through the payment stand-in). With `--relay-cmd` the harness makes one up and passes
    /// it as `{payment_secret}` and `RELAY_PAYMENT_WEBHOOK_SECRET`; with `--relay-url` give
    /// that relay's, or commerce is not run. Never printed.
    #[arg(
        long,
        value_name = "SECRET",
        env = "SIM_JEPSEN_PAYMENT_SECRET",
        hide_env_values = true
    )]
    payment_secret: Option<String>,

    /// Jepsen mode: no commerce (purchases, payments, binds).
    #[arg(long)]
    no_payments: bool,

    /// Jepsen mode: length of the traffic window, in ms.
    #[arg(long, value_name = "MS", default_value_t = 20_000)]
    window_ms: u64,
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

fn parse_shard(s: &str) -> Result<(u64, u64), String> {
    let (i, n) = s
        .split_once('/')
        .ok_or_else(|| format!("expected I/N, got {s:?}"))?;
    let i: u64 = i.parse().map_err(|e| format!("shard index: {e}"))?;
    let n: u64 = n.parse().map_err(|e| format!("shard count: {e}"))?;
    if n == 0 || i == 0 || i > n {
        return Err(format!("shard {i}/{n}: need 1 <= I <= N"));
    }
    Ok((i, n))
}

fn options_line(args: &Args) -> String {
    let mut s = format!(
        "--scale {} --faults {} --store {}",
        args.scale, args.faults, args.store
    );
    if let Some(c) = args.clients {
        let _ = write!(s, " --clients {c}");
    }
    if args.no_bind {
        s.push_str(" --no-bind");
    }
    s.push_str(&plant_option(args));
    s
}

/// ` --plant BUG` when a bug is planted.
fn plant_option(
    #[allow(unused_variables, reason = "only planted bugs need it")] args: &Args,
) -> String {
    #[cfg(feature = "planted-bugs")]
    if let Some(bug) = args.plant {
        return format!(" --plant {bug}");
    }
    String::new()
}

/// `cargo run` with the features this sweep needs.
fn cargo_run(
    #[allow(unused_variables, reason = "only planted bugs need a feature")] args: &Args,
) -> &'static str {
    #[cfg(feature = "planted-bugs")]
    if args.plant.is_some() {
        return "cargo run --release -p sim --features planted-bugs --bin simulate --";
    }
    "cargo run --release -p sim --bin simulate --"
}

fn replay_command(args: &Args, seed: u64) -> String {
    format!(
        "{} --seed {seed} {} --trace",
        cargo_run(args),
        options_line(args)
    )
}

fn config(args: &Args, seed: u64) -> RunConfig {
    RunConfig {
        seed,
        scale: args.scale,
        clients: args.clients.or((args.scale == Scale::Small).then_some(4)),
        faults: args.faults.clone(),
        store: args.store,
        capture_logs: !args.no_log_capture,
        log: args.log.clone(),
        bind_vanity: !args.no_bind,
        replay: None,
        #[cfg(feature = "planted-bugs")]
        planted: args.plant,
    }
}

/// Exit codes: 0 every seed passed; 1 a violation; 2 a usage error or a harness failure (one
/// line on stderr, with the fix); 3 (Jepsen mode) a seed whose scenario did not happen.
fn main() -> ExitCode {
    let args = Args::parse();
    match run_main(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run_main(args: &Args) -> anyhow::Result<ExitCode> {
    if args.clients.is_some_and(|c| c < 2) {
        bail!("--clients must be at least 2");
    }
    if args.relay_cmd.is_some() || args.relay_url.is_some() {
        return jepsen(args);
    }
    if let Some(path) = &args.replay {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let replay: Replay = serde_json::from_str(&text)
            .with_context(|| format!("parsing replay file {}", path.display()))?;
        let config = RunConfig {
            capture_logs: !args.no_log_capture,
            log: args.log.clone(),
            #[cfg(feature = "planted-bugs")]
            planted: args.plant,
            ..RunConfig::replaying(replay)
        };
        return one(args, &config, &format!("--replay {}", path.display()));
    }
    if let Some(seed) = args.seed {
        return one(args, &config(args, seed), &replay_command(args, seed));
    }
    if args.shrink {
        bail!("--shrink needs --seed or --replay");
    }
    let seeds = args.seeds.clone().unwrap_or(0..100);
    sweep(args, seeds)
}

fn one(args: &Args, config: &RunConfig, again: &str) -> anyhow::Result<ExitCode> {
    let report = run(config);
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
    println!("seed {}\n{}\n{}", report.seed, report.scenario, report.plan);
    if args.trace {
        for line in &report.trace {
            println!("{line}");
        }
    }
    let refusals: Vec<_> = report
        .routes
        .iter()
        .filter(|(_, r)| !r.refused.is_empty())
        .collect();
    if !refusals.is_empty() {
        println!(
            "refusals the honest clients got, by route (the scenario's strangers and faults cause some):"
        );
        for (route, r) in refusals {
            let by: Vec<String> = r
                .refused
                .iter()
                .map(|(status, n)| format!("{status} ×{n}"))
                .collect();
            println!("  {route}: {} request(s); {}", r.requests, by.join(", "));
        }
    }
    println!(
        "denominators: {} of {} conversations set up, {} messages acked, {} received, {} receipts applied",
        report.stats.conversations,
        report.stats.pairs,
        report.stats.acked,
        report.stats.received,
        report.stats.receipts
    );
    println!(
        "simulated {:.1} s in {} steps ({} messages acked, {} commits, {} injected commit failures, {} store loads), trace sha256 {}",
        report.simulated.as_secs_f64(),
        report.stats.steps,
        report.stats.acked,
        report.stats.commits,
        report.stats.failed_commits,
        report.stats.loads,
        report.trace_hash
    );
    if report.stats.terms > 0 {
        println!(
            "failover: {} leadership terms, {} commits and loads fenced",
            report.stats.terms, report.stats.fenced
        );
    }
    for v in &report.violations {
        println!("VIOLATION {v}");
    }
    if report.violations.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    println!("replay: {again}");
    if args.shrink {
        shrink_and_write(args, config, &report)?;
    }
    Ok(ExitCode::FAILURE)
}

fn shrink_and_write(args: &Args, config: &RunConfig, report: &RunReport) -> anyhow::Result<()> {
    let start = report.replay(config.bind_vanity);
    let target = report.violations[0].clone();
    println!(
        "shrinking: target [{}], start {} (at most {} runs)",
        target.oracle,
        size(&start),
        args.shrink_runs
    );
    let options = ShrinkOptions {
        max_runs: args.shrink_runs,
        capture_logs: target.oracle == "canary-logs",
        #[cfg(feature = "planted-bugs")]
        planted: args.plant,
    };
    let shrunk = shrink(start, target, options, &mut |line| println!("  {line}"));
    let path = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("shrunk-seed-{}.json", report.seed)));
    let json = serde_json::to_string_pretty(&shrunk.replay).context("encoding the replay")?;
    std::fs::write(&path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
    println!(
        "shrunk in {} runs to {}\n  still fails: {}\n  written to {}\n  replay: {} --replay {}{} --trace",
        shrunk.runs,
        size(&shrunk.replay),
        shrunk.violation,
        path.display(),
        cargo_run(args),
        path.display(),
        plant_option(args),
    );
    Ok(())
}

#[allow(
    clippy::disallowed_methods,
    reason = "wall time of the sweep, for the seeds-per-second summary and --time-budget only; never reaches a run"
)]
fn wall_clock() -> std::time::Instant {
    std::time::Instant::now()
}

/// What one seed of a sweep gave.
struct SeedResult {
    seed: u64,
    hash: String,
    simulated: Duration,
    wall: Duration,
    violations: Vec<(String, String)>,
    stats: sim::RunStats,
}

/// Runs one seed, turning a panic into a violation.
fn run_seed(args: &Args, seed: u64) -> SeedResult {
    let started = wall_clock();
    let config = RunConfig {
        log: None,
        ..config(args, seed)
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&config)));
    let wall = started.elapsed();
    match outcome {
        Ok(r) => SeedResult {
            seed,
            hash: r.trace_hash,
            simulated: r.simulated,
            wall,
            stats: r.stats,
            violations: r
                .violations
                .into_iter()
                .map(|v| (v.oracle.to_owned(), v.detail))
                .collect(),
        },
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "unknown panic".to_owned());
            SeedResult {
                seed,
                hash: String::new(),
                simulated: Duration::ZERO,
                wall,
                stats: sim::RunStats::default(),
                violations: vec![("panic".to_owned(), what)],
            }
        }
    }
}

fn in_shard(shard: Option<(u64, u64)>, start: u64, seed: u64) -> bool {
    shard.is_none_or(|(i, n)| (seed - start) % n == i - 1)
}

/// Runs the seeds of the sweep (this shard's, until the time budget), reports, writes the
/// JSON and JUnit files.
fn sweep(args: &Args, seeds: Range<u64>) -> anyhow::Result<ExitCode> {
    let mine: Vec<u64> = seeds
        .clone()
        .filter(|s| in_shard(args.shard, seeds.start, *s))
        .collect();
    let total = mine.len() as u64;
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
        .max(1);
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} seeds  {per_sec}  eta {eta}  {msg}")
            .context("progress template")?,
    );
    let started = wall_clock();
    let mut results = run_seeds(args, mine, jobs, started, &bar);
    bar.finish();
    results.sort_by_key(|r| r.seed);
    let wall = started.elapsed();
    let seeds_per_s = results.len() as f64 / wall.as_secs_f64().max(1e-9);
    let failing = summarize(args, &results, total, wall, jobs);
    if let Some(path) = &args.json {
        write_json(args, path, &seeds, &results, wall, seeds_per_s)?;
    }
    if let Some(path) = &args.junit {
        write_junit(args, path, &results, wall)?;
    }
    Ok(if failing == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Runs `seeds` on `jobs` threads (each takes the next seed until none is left or the time
/// budget is spent), reporting each failing seed as it comes.
fn run_seeds(
    args: &Args,
    seeds: Vec<u64>,
    jobs: usize,
    started: std::time::Instant,
    bar: &ProgressBar,
) -> Vec<SeedResult> {
    let budget = args.time_budget.map(Duration::from_secs);
    let next = Arc::new(AtomicU64::new(0));
    let seeds = Arc::new(seeds);
    let (tx, rx) = mpsc::channel::<SeedResult>();
    let mut results: Vec<SeedResult> = Vec::new();
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            let (next, seeds, tx) = (Arc::clone(&next), Arc::clone(&seeds), tx.clone());
            scope.spawn(move || {
                loop {
                    if budget.is_some_and(|b| started.elapsed() >= b) {
                        return;
                    }
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(&seed) = seeds.get(usize::try_from(i).unwrap_or(usize::MAX)) else {
                        return;
                    };
                    if tx.send(run_seed(args, seed)).is_err() {
                        return;
                    }
                }
            });
        }
        drop(tx);
        let mut failing = 0;
        for r in rx {
            if !r.violations.is_empty() {
                failing += 1;
                report_failing(bar, &r, failing);
            }
            bar.inc(1);
            results.push(r);
        }
    });
    results
}

/// One line for a failing seed, above the progress bar.
fn report_failing(bar: &ProgressBar, r: &SeedResult, failing: u64) {
    let line = format!(
        "seed {}: {} violation(s), first: [{}] {}",
        r.seed,
        r.violations.len(),
        r.violations[0].0,
        r.violations[0].1
    );
    // A hidden bar (no terminal: CI logs) drops `println`.
    if bar.is_hidden() {
        eprintln!("{line}");
    } else {
        bar.println(line);
    }
    bar.set_message(format!("{failing} failing"));
}

/// Prints the sweep's summary: seeds run, failing seeds by oracle, speed, replay commands.
/// Returns the number of failing seeds.
fn summarize(
    args: &Args,
    results: &[SeedResult],
    total: u64,
    wall: Duration,
    jobs: usize,
) -> usize {
    let simulated: Duration = results.iter().map(|r| r.simulated).sum();
    let failing: Vec<&SeedResult> = results
        .iter()
        .filter(|r| !r.violations.is_empty())
        .collect();
    let mut by_oracle: BTreeMap<&str, u64> = BTreeMap::new();
    for r in &failing {
        for (oracle, _) in &r.violations {
            *by_oracle.entry(oracle.as_str()).or_default() += 1;
        }
    }
    let shard = args
        .shard
        .map_or_else(String::new, |(i, n)| format!(" (shard {i}/{n})"));
    println!(
        "\nseeds run: {} of {total}{shard}{}",
        results.len(),
        if (results.len() as u64) < total {
            " (time budget reached)"
        } else {
            ""
        }
    );
    let sum = |f: fn(&sim::RunStats) -> u64| results.iter().map(|r| f(&r.stats)).sum::<u64>();
    println!(
        "denominators: {} of {} conversations set up, {} messages acked, {} received, {} receipts applied; fewest acked in one seed: {}",
        sum(|s| s.conversations),
        sum(|s| s.pairs),
        sum(|s| s.acked),
        sum(|s| s.received),
        sum(|s| s.receipts),
        results.iter().map(|r| r.stats.acked).min().unwrap_or(0)
    );
    println!("failing seeds: {}", failing.len());
    for (oracle, n) in &by_oracle {
        println!("  {oracle}: {n} violation(s)");
    }
    let seeds_per_s = results.len() as f64 / wall.as_secs_f64().max(1e-9);
    println!(
        "simulated {:.0} s in {:.1} s wall ({:.0}x) on {jobs} thread(s), {seeds_per_s:.2} seeds/s",
        simulated.as_secs_f64(),
        wall.as_secs_f64(),
        simulated.as_secs_f64() / wall.as_secs_f64().max(1e-9),
    );
    for r in &failing {
        println!("replay seed {}: {}", r.seed, replay_command(args, r.seed));
    }
    failing.len()
}

fn write_json(
    args: &Args,
    path: &Path,
    seeds: &Range<u64>,
    results: &[SeedResult],
    wall: Duration,
    seeds_per_s: f64,
) -> anyhow::Result<()> {
    let seeds_json: Vec<serde_json::Value> = results
        .iter()
        .map(|r| {
            serde_json::json!({
                "seed": r.seed,
                "trace_sha256": r.hash,
                "simulated_ms": u64::try_from(r.simulated.as_millis()).unwrap_or(u64::MAX),
                "wall_ms": u64::try_from(r.wall.as_millis()).unwrap_or(u64::MAX),
                "violations": r.violations.iter().map(|(o, d)| serde_json::json!({"oracle": o, "detail": d})).collect::<Vec<_>>(),
                "replay": (!r.violations.is_empty()).then(|| replay_command(args, r.seed)),
            })
        })
        .collect();
    let doc = serde_json::json!({
        "seeds": { "start": seeds.start, "end": seeds.end },
        "shard": args.shard.map(|(i, n)| format!("{i}/{n}")),
        "scale": args.scale.name(),
        "faults": args.faults.to_string(),
        "store": args.store.to_string(),
        "ran": results.len(),
        "failing": results.iter().filter(|r| !r.violations.is_empty()).map(|r| r.seed).collect::<Vec<_>>(),
        "wall_s": wall.as_secs_f64(),
        "seeds_per_s": seeds_per_s,
        "results": seeds_json,
    });
    let text = serde_json::to_string_pretty(&doc).context("encoding JSON")?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && !matches!(c, '\n' | '\t' | '\r') => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn write_junit(
    args: &Args,
    path: &Path,
    results: &[SeedResult],
    wall: Duration,
) -> anyhow::Result<()> {
    let failures = results.iter().filter(|r| !r.violations.is_empty()).count();
    let name = args.shard.map_or_else(
        || format!("simulate {}", options_line(args)),
        |(i, n)| format!("simulate {} shard {i}/{n}", options_line(args)),
    );
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        xml,
        "<testsuites tests=\"{}\" failures=\"{failures}\" time=\"{:.3}\">",
        results.len(),
        wall.as_secs_f64()
    );
    let _ = writeln!(
        xml,
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" time=\"{:.3}\">",
        xml_escape(&name),
        results.len(),
        wall.as_secs_f64()
    );
    for r in results {
        let _ = write!(
            xml,
            "    <testcase classname=\"simulate.{}\" name=\"seed {}\" time=\"{:.3}\"",
            args.scale,
            r.seed,
            r.wall.as_secs_f64()
        );
        if r.violations.is_empty() {
            xml.push_str("/>\n");
            continue;
        }
        let (oracle, detail) = &r.violations[0];
        let mut body = String::new();
        for (o, d) in &r.violations {
            let _ = writeln!(body, "[{o}] {d}");
        }
        let _ = writeln!(body, "replay: {}", replay_command(args, r.seed));
        let _ = writeln!(
            xml,
            ">\n      <failure message=\"{}\" type=\"{}\">{}</failure>\n    </testcase>",
            xml_escape(&format!("[{oracle}] {detail}")),
            xml_escape(oracle),
            xml_escape(&body)
        );
    }
    xml.push_str("  </testsuite>\n</testsuites>\n");
    std::fs::write(path, xml).with_context(|| format!("writing {}", path.display()))
}

/// Jepsen mode: each seed against the relay process (or URL); prints the seed, the plan and
/// the verdict, writes the histories, exits 1 on a violation.
fn jepsen(args: &Args) -> anyhow::Result<ExitCode> {
    let target = match (&args.relay_cmd, &args.relay_url) {
        (Some(cmd), _) => RelayTarget::Command(cmd.clone()),
        (None, Some(url)) => RelayTarget::Url(url.clone()),
        (None, None) => bail!("--relay-cmd or --relay-url"),
    };
    let seeds = match (args.seed, &args.seeds) {
        (Some(s), _) => s..s + 1,
        (None, Some(r)) => r.clone(),
        (None, None) => 0..1,
    };
    if let Some(dir) = &args.history_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    println!(
        "Jepsen mode: real sockets and processes, NOT bit-deterministic (the seed fixes the scenario, the fault plan and the proxy's draws; timing differs between runs)"
    );
    let mut failed = Vec::new();
    let mut setup = Vec::new();
    let mut oracles_line = false;
    let mut reports = Vec::new();
    for seed in seeds {
        let config = jepsen_config(args, seed, target.clone())?;
        println!("seed {seed}: plan");
        for e in jepsen::draw_plan(&config) {
            println!("  +{:>6} ms  {}", e.at_ms, serde_json::to_string(&e.fault)?);
        }
        let report = jepsen::run(&config)
            .with_context(|| format!("seed {seed}: the harness could not run"))?;
        if !oracles_line {
            println!("oracles: {}", report.oracles.join(", "));
            println!("not applicable: {}", report.not_applicable.join("; "));
            oracles_line = true;
        }
        jepsen_report(args, &report)?;
        match report.verdict {
            jepsen::Verdict::Pass => {}
            jepsen::Verdict::Fail => failed.push(seed),
            jepsen::Verdict::Setup => setup.push(seed),
        }
        reports.push(report);
    }
    jepsen_files(args, &reports)?;
    if !failed.is_empty() {
        println!("verdict: fail: violations in seeds {failed:?}");
        if !setup.is_empty() {
            println!("(and the scenario did not happen in seeds {setup:?}: verdict setup)");
        }
        Ok(ExitCode::FAILURE)
    } else if !setup.is_empty() {
        println!(
            "verdict: setup: the scenario did not happen in seeds {setup:?} (nothing was judged there; see the refusals above)"
        );
        Ok(ExitCode::from(3))
    } else {
        println!("verdict: pass: 0 violations");
        Ok(ExitCode::SUCCESS)
    }
}

/// `--json` (every seed's verdict, counts, routes and violations, without the histories) and
/// `--junit` (one test case per seed; a `setup` verdict is an error, a violation a failure).
fn jepsen_files(args: &Args, reports: &[JepsenReport]) -> anyhow::Result<()> {
    if let Some(path) = &args.json {
        let seeds: Vec<serde_json::Value> = reports
            .iter()
            .map(|r| {
                serde_json::json!({
                    "seed": r.seed, "verdict": r.verdict, "counts": r.counts, "routes": r.routes,
                    "frames": r.frames, "violations": r.violations, "plan": r.plan,
                })
            })
            .collect();
        let doc = serde_json::json!({
            "mode": "jepsen",
            "target": reports.first().map(|r| r.target.clone()),
            "oracles": reports.first().map(|r| r.oracles.clone()),
            "not_applicable": reports.first().map(|r| r.not_applicable.clone()),
            "seeds": seeds,
        });
        let text = serde_json::to_string_pretty(&doc).context("encoding JSON")?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.junit {
        let count = |v: jepsen::Verdict| reports.iter().filter(|r| r.verdict == v).count();
        let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        let _ = writeln!(
            xml,
            "<testsuite name=\"simulate jepsen\" tests=\"{}\" failures=\"{}\" errors=\"{}\">",
            reports.len(),
            count(jepsen::Verdict::Fail),
            count(jepsen::Verdict::Setup)
        );
        for r in reports {
            let _ = write!(
                xml,
                "  <testcase classname=\"jepsen\" name=\"seed {}\"",
                r.seed
            );
            let body = xml_escape(&r.violations.join("\n"));
            match r.verdict {
                jepsen::Verdict::Pass => xml.push_str("/>\n"),
                jepsen::Verdict::Fail => {
                    let _ = writeln!(
                        xml,
                        "><failure message=\"violations\">{body}</failure></testcase>"
                    );
                }
                jepsen::Verdict::Setup => {
                    let _ = writeln!(
                        xml,
                        "><error message=\"setup: the scenario did not happen\">{body}</error></testcase>"
                    );
                }
            }
        }
        xml.push_str("</testsuite>\n");
        std::fs::write(path, xml).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The Jepsen-mode configuration of `seed` from the flags.
fn jepsen_config(args: &Args, seed: u64, target: RelayTarget) -> anyhow::Result<JepsenConfig> {
    let mut config = JepsenConfig::new(seed, target);
    config.clients = args.clients.unwrap_or(4);
    config.window_ms = args.window_ms;
    config.process_faults = !args.no_process_faults;
    if let Some(secret) = &args.payment_secret {
        config.payment_secret = Some(secret.clone());
    }
    if args.no_payments {
        config.payment_secret = None;
    }
    if let Some(t) = &args.proxy_toxics {
        config.toxics = match t.trim() {
            "" | "none" => Vec::new(),
            list => list.split(',').map(|s| s.trim().to_owned()).collect(),
        };
        for name in &config.toxics {
            if fault_proxy::Toxic::named(name).is_none() {
                bail!("--proxy-toxics: unknown toxic {name:?}");
            }
        }
    }
    Ok(config)
}

/// Prints one seed's verdict and writes its history (always with `--history` or
/// `--history-dir`; to the temporary directory when it failed).
fn jepsen_report(args: &Args, report: &JepsenReport) -> anyhow::Result<()> {
    let seed = report.seed;
    let path = match (&args.history, &args.history_dir) {
        (Some(p), _) => Some(p.clone()),
        (None, Some(d)) => Some(d.join(format!("seed-{seed}.json"))),
        (None, None) if !report.violations.is_empty() => {
            Some(std::env::temp_dir().join(format!("jepsen-seed-{seed}.json")))
        }
        (None, None) => None,
    };
    if let Some(p) = &path {
        jepsen::write_history(report, p).with_context(|| format!("writing {}", p.display()))?;
    }
    let written = path.map_or_else(String::new, |p| format!("; history {}", p.display()));
    let c = &report.counts;
    println!(
        "seed {seed}: verdict {:?}: {} accounts, {} of {} conversations, {} sent, {} acked ({} ack frames), {} received ({} msg frames), {} receipts, {} orders ({} paid), {} kills, {} pauses, {} proxy phases, {} violation(s){written}",
        report.verdict,
        c.accounts,
        c.conversations,
        c.conversations_wanted,
        c.sent,
        report.acked,
        c.acks_seen,
        report.received,
        c.msgs_seen,
        c.receipts_seen,
        c.orders,
        c.orders_paid,
        c.kills,
        c.pauses,
        c.proxy_phases,
        report.violations.len()
    );
    let refusals: Vec<_> = report
        .routes
        .iter()
        .filter(|(_, r)| !r.refused.is_empty())
        .collect();
    if !refusals.is_empty() {
        println!("  refusals by route (requests, then answers that were not 2xx):");
        for (route, r) in refusals {
            let by: Vec<String> = r
                .refused
                .iter()
                .map(|(status, n)| {
                    let body = r.first_body.get(status).map_or("", String::as_str);
                    format!("{status} ×{n} (first: {body})")
                })
                .collect();
            println!("    {route}: {} request(s); {}", r.requests, by.join("; "));
        }
    }
    for v in &report.violations {
        println!("VIOLATION seed {seed} {v}");
    }
    Ok(())
}
