//! A sweep: seeds on worker threads, a progress bar, the summary, and the JSON, JUnit and
//! HTML reports.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::ops::Range;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressStyle};
use sim::coverage::{self, Coverage, STEER_BATCH, Steering};
use sim::faults::{FaultKind, FaultSelection};
use sim::report::{SummaryRow, Timeline};
use sim::{RunConfig, run};

use crate::{Args, config, options_line, pages, replay_command_with};

#[allow(
    clippy::disallowed_methods,
    reason = "wall time of the sweep, for the seeds-per-second summary and --time-budget only; never reaches a run"
)]
pub(crate) fn wall_clock() -> std::time::Instant {
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
    /// With `--report`: whether the seed's page was written, or why it could not be.
    page: Result<bool, String>,
    /// The code probes the run hit.
    probes: BTreeMap<String, u64>,
    /// The fault kinds its plan drew.
    kinds: BTreeSet<FaultKind>,
    /// The command that replays it.
    replay: String,
    /// Its class.
    class: sim::class::Class,
    /// What each drill judged and left unjudged.
    drills: BTreeMap<sim::drills::Drill, (u64, u64)>,
    /// How far the relay's clock moved over the run.
    relay_elapsed: Duration,
}

/// Runs one seed drawing its faults from `faults`, turning a panic into a violation.
fn run_seed(args: &Args, seed: u64, faults: &FaultSelection) -> SeedResult {
    let started = wall_clock();
    let config = RunConfig {
        log: None,
        faults: faults.clone(),
        ..config(args, seed)
    };
    let replay = replay_command_with(args, seed, faults);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&config)));
    let wall = started.elapsed();
    match outcome {
        Ok(mut r) => SeedResult {
            seed,
            page: failing_page(args, &r, &replay),
            probes: std::mem::take(&mut r.probes),
            kinds: r.plan.kinds.clone(),
            replay,
            class: r.class,
            drills: std::mem::take(&mut r.drill_counts),
            relay_elapsed: r.relay_elapsed,
            hash: r.trace_hash,
            simulated: r.simulated,
            wall,
            stats: r.stats,
            violations: r
                .violations
                .into_iter()
                .map(|v| (v.oracle.name().to_owned(), v.detail))
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
                page: Ok(false),
                probes: BTreeMap::new(),
                kinds: BTreeSet::new(),
                replay,
                class: config.class.of(seed),
                drills: BTreeMap::new(),
                relay_elapsed: Duration::ZERO,
                violations: vec![("panic".to_owned(), what)],
            }
        }
    }
}

/// With `--report`, writes the page of a seed that failed; whether it wrote one.
fn failing_page(args: &Args, r: &sim::RunReport, replay: &str) -> Result<bool, String> {
    let Some(dir) = &args.report else {
        return Ok(false);
    };
    if r.violations.is_empty() {
        return Ok(false);
    }
    let timeline = Timeline::from_run(r, replay);
    pages::write_seed_page(dir, r.seed, &timeline)
        .map(|_| true)
        .map_err(|e| format!("{e:#}"))
}

pub(crate) fn in_shard(shard: Option<(u64, u64)>, start: u64, seed: u64) -> bool {
    shard.is_none_or(|(i, n)| (seed - start) % n == i - 1)
}

/// Runs the seeds of the sweep (this shard's, until the time budget), reports, writes the
/// JSON and JUnit files.
pub(crate) fn sweep(args: &Args, seeds: Range<u64>) -> anyhow::Result<ExitCode> {
    if args.steer && args.faults != FaultSelection::Swarm {
        anyhow::bail!(
            "--steer moves the swarm's weights: drop --faults {}",
            args.faults
        );
    }
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
    if let Some(dir) = &args.report {
        pages::create_dir(dir)?;
    }
    let started = wall_clock();
    let (mut results, steering) = if args.steer {
        steered(args, &mine, jobs, started, &bar)
    } else {
        (
            run_seeds(args, mine, jobs, started, &bar, &args.faults),
            Vec::new(),
        )
    };
    bar.finish();
    results.sort_by_key(|r| r.seed);
    let wall = started.elapsed();
    let seeds_per_s = results.len() as f64 / wall.as_secs_f64().max(1e-9);
    let failing = summarize(args, &results, total, wall, jobs);
    let mut coverage = Coverage::default();
    for r in &results {
        coverage.add(&r.probes);
    }
    let catalogue = coverage::catalogue();
    print!("{}", coverage.summary(&catalogue));
    if let Some((_, last)) = steering.last() {
        println!(
            "steering: {} batch(es); the last drew from --faults {last}",
            steering.len()
        );
    }
    if args.update_probe_catalogue {
        update_catalogue(&coverage)?;
    }
    if let Some(path) = &args.json {
        let probes = coverage.to_json(&catalogue);
        let steering: Vec<serde_json::Value> = steering
            .iter()
            .map(|(first, faults)| serde_json::json!({"first_seed": first, "faults": faults}))
            .collect();
        let extra = serde_json::json!({"probes": probes, "steering": steering});
        write_json(args, path, &seeds, &results, wall, seeds_per_s, &extra)?;
    }
    if let Some(path) = &args.junit {
        write_junit(args, path, &results, wall)?;
    }
    if let Some(dir) = &args.report {
        write_summary(args, dir, &seeds, &results, wall)?;
    }
    Ok(if failing == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `--steer`: runs `seeds` in batches of [`STEER_BATCH`], moving the swarm's weights after
/// each (see [`Steering`]); returns the results and each batch's first seed and selection.
fn steered(
    args: &Args,
    seeds: &[u64],
    jobs: usize,
    started: std::time::Instant,
    bar: &ProgressBar,
) -> (Vec<SeedResult>, Vec<(u64, String)>) {
    let mut steering = Steering::default();
    let mut seen = Coverage::default();
    let (mut results, mut log) = (Vec::new(), Vec::new());
    let batch_len = usize::try_from(STEER_BATCH).unwrap_or(usize::MAX);
    for batch in seeds.chunks(batch_len) {
        let selection = steering.selection();
        let mut ran = run_seeds(args, batch.to_vec(), jobs, started, bar, &selection);
        ran.sort_by_key(|r| r.seed);
        log.push((batch[0], selection.to_string()));
        for r in &ran {
            seen.add(&r.probes);
        }
        let runs: Vec<(BTreeSet<FaultKind>, &BTreeMap<String, u64>)> =
            ran.iter().map(|r| (r.kinds.clone(), &r.probes)).collect();
        steering.update(&seen, &runs);
        let short = ran.len() < batch.len();
        results.extend(ran);
        if short {
            break; // the time budget ran out
        }
    }
    (results, log)
}

/// Runs `seeds` on `jobs` threads (each takes the next seed until none is left or the time
/// budget is spent), reporting each failing seed as it comes.
fn run_seeds(
    args: &Args,
    seeds: Vec<u64>,
    jobs: usize,
    started: std::time::Instant,
    bar: &ProgressBar,
    faults: &FaultSelection,
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
                    if tx.send(run_seed(args, seed, faults)).is_err() {
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
        "denominators: {} of {} conversations set up, {} messages acked, {} received, {} receipts applied, {} bounds on the relay's webhook counters, {} messages handed between shards ({} crossings faulted); fewest acked in one seed: {}",
        sum(|s| s.conversations),
        sum(|s| s.pairs),
        sum(|s| s.acked),
        sum(|s| s.received),
        sum(|s| s.receipts),
        sum(|s| s.webhook_bounds),
        sum(|s| s.handed_off),
        sum(|s| s.crossings_faulted),
        results.iter().map(|r| r.stats.acked).min().unwrap_or(0)
    );
    classes_line(results);
    drills_line(results);
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
        println!("replay seed {}: {}", r.seed, r.replay);
    }
    failing.len()
}

/// `classes: standard 10, days 10 (relay clock up to 4.2 days), ...`.
fn classes_line(results: &[SeedResult]) {
    let mut by: BTreeMap<sim::class::Class, (u64, Duration)> = BTreeMap::new();
    for r in results {
        let e = by.entry(r.class).or_default();
        e.0 += 1;
        e.1 = e.1.max(r.relay_elapsed);
    }
    let parts: Vec<String> = by
        .iter()
        .map(|(c, (n, most))| {
            format!(
                "{c} {n} (relay clock up to {:.1} days)",
                most.as_secs_f64() / 86_400.0
            )
        })
        .collect();
    println!("classes: {}", parts.join(", "));
}

/// `drills (checks judged / steps a fault left unjudged): tokenless 300/0, ...`.
fn drills_line(results: &[SeedResult]) {
    let mut by: BTreeMap<sim::drills::Drill, (u64, u64)> = BTreeMap::new();
    for r in results {
        for (d, (j, u)) in &r.drills {
            let e = by.entry(*d).or_default();
            e.0 += j;
            e.1 += u;
        }
    }
    if by.is_empty() {
        return;
    }
    let parts: Vec<String> = by
        .iter()
        .map(|(d, (j, u))| format!("{d} {j}/{u}"))
        .collect();
    println!(
        "drills (checks judged / steps a fault left unjudged): {}",
        parts.join(", ")
    );
}

fn write_json(
    args: &Args,
    path: &Path,
    seeds: &Range<u64>,
    results: &[SeedResult],
    wall: Duration,
    seeds_per_s: f64,
    extra: &serde_json::Value,
) -> anyhow::Result<()> {
    let seeds_json: Vec<serde_json::Value> = results
        .iter()
        .map(|r| {
            serde_json::json!({
                "seed": r.seed,
                "class": r.class.name(),
                "relay_elapsed_ms": u64::try_from(r.relay_elapsed.as_millis()).unwrap_or(u64::MAX),
                "drills": r.drills.iter().map(|(d, (j, u))| (d.name().to_owned(), serde_json::json!({"judged": j, "unjudged": u}))).collect::<serde_json::Map<_, _>>(),
                "trace_sha256": r.hash,
                "simulated_ms": u64::try_from(r.simulated.as_millis()).unwrap_or(u64::MAX),
                "wall_ms": u64::try_from(r.wall.as_millis()).unwrap_or(u64::MAX),
                "violations": r.violations.iter().map(|(o, d)| serde_json::json!({"oracle": o, "detail": d})).collect::<Vec<_>>(),
                "replay": (!r.violations.is_empty()).then(|| r.replay.clone()),
            })
        })
        .collect();
    let doc = serde_json::json!({
        "seeds": { "start": seeds.start, "end": seeds.end },
        "shard": args.shard.map(|(i, n)| format!("{i}/{n}")),
        "scale": args.scale.name(),
        "faults": args.faults.to_string(),
        "store": args.store.to_string(),
        "class": args.class.to_string(),
        "ran": results.len(),
        "failing": results.iter().filter(|r| !r.violations.is_empty()).map(|r| r.seed).collect::<Vec<_>>(),
        "wall_s": wall.as_secs_f64(),
        "seeds_per_s": seeds_per_s,
        "results": seeds_json,
        "probes": extra["probes"],
        "steering": extra["steering"],
    });
    let text = serde_json::to_string_pretty(&doc).context("encoding JSON")?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

pub(crate) use sim::report::escape as xml_escape;

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
        let _ = writeln!(body, "replay: {}", r.replay);
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

/// `--report`: the summary page of the sweep, linking each failing seed's page.
fn write_summary(
    args: &Args,
    dir: &Path,
    seeds: &Range<u64>,
    results: &[SeedResult],
    wall: Duration,
) -> anyhow::Result<()> {
    if let Some(e) = results.iter().find_map(|r| r.page.as_ref().err()) {
        anyhow::bail!("--report: {e}");
    }
    let rows: Vec<SummaryRow> = results
        .iter()
        .map(|r| SummaryRow {
            seed: r.seed,
            verdict: match r.violations.first() {
                None => "pass",
                Some((oracle, _)) if oracle == "panic" => "panic",
                Some(_) => "fail",
            }
            .to_owned(),
            oracles: pages::by_oracle(r.violations.iter().map(|(o, _)| o.as_str())),
            page: r.page == Ok(true),
        })
        .collect();
    let sum = |f: fn(&sim::RunStats) -> u64| results.iter().map(|r| f(&r.stats)).sum::<u64>();
    let simulated: Duration = results.iter().map(|r| r.simulated).sum();
    let mut facts = vec![
        (
            "command".to_owned(),
            format!(
                "{} --seeds {}..{} {}",
                crate::cargo_run(args),
                seeds.start,
                seeds.end,
                options_line(args)
            ),
        ),
        ("seeds run".to_owned(), results.len().to_string()),
        (
            "denominators".to_owned(),
            format!(
                "{} of {} conversations set up, {} messages acked, {} received, {} receipts applied",
                sum(|s| s.conversations),
                sum(|s| s.pairs),
                sum(|s| s.acked),
                sum(|s| s.received),
                sum(|s| s.receipts)
            ),
        ),
        (
            "time".to_owned(),
            format!(
                "{:.0} s simulated in {:.1} s wall",
                simulated.as_secs_f64(),
                wall.as_secs_f64()
            ),
        ),
    ];
    if let Some((i, n)) = args.shard {
        facts.push(("shard".to_owned(), format!("{i}/{n}")));
    }
    let index = pages::write_index(dir, "simulate: sweep", &facts, &rows)?;
    println!("report: {}", index.display());
    Ok(())
}

/// `--update-probe-catalogue`: rewrites `sim/probes.txt` with every probe the sources declare
/// and every probe this sweep hit, marking the hit ones `must` and keeping the reasons the
/// others give.
fn update_catalogue(coverage: &Coverage) -> anyhow::Result<()> {
    let root = Path::new(coverage::WORKSPACE);
    let mut names = coverage::scan_sources(root)
        .with_context(|| format!("scanning the sources under {}", root.display()))?;
    let hit: BTreeSet<String> = coverage.probes.keys().cloned().collect();
    names.extend(hit.iter().cloned());
    let path = coverage::CATALOGUE_PATH;
    std::fs::write(path, coverage::render(&names, &hit, &coverage::catalogue()))
        .with_context(|| format!("writing {path}"))?;
    println!(
        "probe catalogue: {} probes, {} marked must, written to {path}",
        names.len(),
        hit.len()
    );
    Ok(())
}
