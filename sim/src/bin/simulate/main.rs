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

mod jepsen;
mod pages;
mod sweep;

use std::fmt::Write as _;
use std::ops::Range;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Parser;
use sim::ShardsChoice;
use sim::class::ClassChoice;
use sim::faults::{FaultSelection, StoreChoice};
use sim::oracles::Oracle;
use sim::report::{SummaryRow, Timeline};
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
    /// balancer; the active one freezes or dies and the standby takes over), cluster (three
    /// relay nodes share the shards over one store behind a load balancer; the busiest
    /// freezes past its lease, dies and rejoins, leaves and comes back, or is cut from the
    /// database or the balancer; two nodes lose their links), handoff (a
    /// sharded relay only, see `--shards`: crossings between its cores lost, repeated or
    /// delayed, one shard's store failing or slow alone, power-offs around the hand-off's
    /// commits).
    #[arg(long, default_value = "swarm")]
    faults: FaultSelection,

    /// The relay's store: `drawn` (SQLite in about a third of the seeds), `memory`, `sqlite`.
    #[arg(long, default_value = "drawn")]
    store: StoreChoice,

    /// Relay cores of the relay (`relay --shards`): a count, or `drawn` (1 to 4 per seed).
    #[arg(long, default_value = "1")]
    shards: ShardsChoice,

    /// Seed class: `mixed` (a quarter of the seeds each), or one of `standard`, `days` (the
    /// world's clock jumps across idle stretches: three days and more of TTLs, token
    /// lifetimes, holds and rate windows), `heavy` (big state across a relay power cycle:
    /// a heavy author, credentials issued before it), `limits` (every limit scaled down
    /// and filled by drills; production's push policy). Every class also runs the drills
    /// of routes without a token, of wrong values and of lookups (see `sim::class`,
    /// `sim::drills`).
    #[arg(long, default_value = "mixed")]
    class: ClassChoice,

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

    /// Writes HTML reports into this directory (created if missing): a page per failing seed
    /// (with `--seed` or `--replay`, the run's page whatever its verdict; Jepsen mode, each seed
    /// that did not pass) with the timeline, the fault plan, the violations and the latency
    /// plots, and `index.html`, the summary linking them.
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,

    /// Coverage-steered swarm: after each batch of 20 seeds, the fault kinds whose runs hit
    /// rarely-hit code probes get more weight (within 8..56 of 64; the swarm's default is 24).
    /// Deterministic: a batch's weights depend only on the batches before it; each seed's
    /// replay command carries its weights (`--faults swarm:KIND=W,…`), and `--json` the
    /// weights of every batch.
    #[arg(long, conflicts_with_all = ["seed", "replay", "relay_cmd", "relay_url"])]
    steer: bool,

    /// After the sweep, rewrites the probe catalogue (`sim/probes.txt` in the source tree this
    /// binary was built from): every probe the sources declare and every probe hit, the hit
    /// ones marked `must`. Run it with the README's main sweep.
    #[arg(long, conflicts_with_all = ["seed", "replay", "relay_cmd", "relay_url"])]
    update_probe_catalogue: bool,

    /// With `--seed`: machine-readable output (`SIM_MS`, `HASH`, `VIOLATION` lines).
    #[arg(long, hide = true)]
    machine: bool,

    /// Plants one known bug in the relay (test builds only: feature `planted-bugs`), to see
    /// which seeds catch it: ack-without-commit, receipt-clears-beyond-seq, no-message-dedup,
    /// sync-stops-at-empty-conversation, seq-not-persisted, sync-ignores-window,
    /// token-signature-ignored, no-write-deadline, no-push-delivery, unfenced-store,
    /// shard-unfenced, lease-renewed-after-lapse, handoff-outbox-not-resumed, … (an unknown
    /// name lists them all).
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

pub(crate) fn options_line(args: &Args) -> String {
    options_line_with(args, &args.faults)
}

/// The options of a run of this sweep drawing its faults from `faults`.
pub(crate) fn options_line_with(args: &Args, faults: &FaultSelection) -> String {
    let mut s = format!(
        "--scale {} --faults {faults} --store {}",
        args.scale, args.store
    );
    if args.shards != ShardsChoice::Fixed(1) {
        let _ = write!(s, " --shards {}", args.shards);
    }
    if let Some(c) = args.clients {
        let _ = write!(s, " --clients {c}");
    }
    if args.class != ClassChoice::Mixed {
        let _ = write!(s, " --class {}", args.class);
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
pub(crate) fn cargo_run(
    #[allow(unused_variables, reason = "only planted bugs need a feature")] args: &Args,
) -> &'static str {
    #[cfg(feature = "planted-bugs")]
    if args.plant.is_some() {
        return "cargo run --release -p sim --features planted-bugs --bin simulate --";
    }
    "cargo run --release -p sim --bin simulate --"
}

pub(crate) fn replay_command(args: &Args, seed: u64) -> String {
    replay_command_with(args, seed, &args.faults)
}

/// The command that replays `seed` of this sweep drawn from `faults`.
pub(crate) fn replay_command_with(args: &Args, seed: u64, faults: &FaultSelection) -> String {
    format!(
        "{} --seed {seed} {} --trace",
        cargo_run(args),
        options_line_with(args, faults)
    )
}

/// The drills' names, comma-separated (`none` without any).
pub(crate) fn drill_names(drills: &[sim::drills::Drill]) -> String {
    if drills.is_empty() {
        return "none".to_owned();
    }
    drills
        .iter()
        .map(|d| d.name())
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn config(args: &Args, seed: u64) -> RunConfig {
    RunConfig {
        seed,
        scale: args.scale,
        clients: args.clients.or((args.scale == Scale::Small).then_some(4)),
        faults: args.faults.clone(),
        store: args.store,
        shards: args.shards,
        class: args.class,
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
    if !sim::tokio_seeded() {
        eprintln!(
            "warning: built without `--cfg tokio_unstable` (a RUSTFLAGS in the environment \
             replaces the workspace's .cargo/config.toml): tokio's random choices are not \
             seeded, so a seed may not replay the same run"
        );
    }
    if args.clients.is_some_and(|c| c < 2) {
        bail!("--clients must be at least 2");
    }
    if args.relay_cmd.is_some() || args.relay_url.is_some() {
        return jepsen::jepsen(args);
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
    sweep::sweep(args, seeds)
}

fn one(args: &Args, config: &RunConfig, again: &str) -> anyhow::Result<ExitCode> {
    let report = run(config);
    if let Some(dir) = &args.report {
        one_page(dir, &report, again)?;
    }
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
    println!(
        "seed {} (class {}; drills: {})\n{}\n{}",
        report.seed,
        report.class,
        drill_names(&report.drills),
        report.scenario,
        report.plan
    );
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

/// `--report` for one run: its page, and a summary with its one row.
fn one_page(dir: &std::path::Path, report: &RunReport, again: &str) -> anyhow::Result<()> {
    pages::create_dir(dir)?;
    pages::write_seed_page(dir, report.seed, &Timeline::from_run(report, again))?;
    let row = SummaryRow {
        seed: report.seed,
        verdict: if report.violations.is_empty() {
            "pass"
        } else {
            "fail"
        }
        .to_owned(),
        oracles: pages::by_oracle(report.violations.iter().map(|v| v.oracle.name())),
        page: true,
    };
    let facts = [("command".to_owned(), again.to_owned())];
    let index = pages::write_index(
        dir,
        &format!("simulate: seed {}", report.seed),
        &facts,
        &[row],
    )?;
    println!("report: {}", index.display());
    Ok(())
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
        capture_logs: target.oracle == Oracle::CanaryLogs,
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
