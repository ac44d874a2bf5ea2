//! Jepsen mode: the scenario on real sockets against a relay process (or URL), its verdicts,
//! histories and reports.

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use sim::jepsen::{self, JepsenConfig, JepsenReport, RelayTarget};
use sim::report::{SummaryRow, Timeline};

use crate::Args;
use crate::pages;
use crate::sweep::xml_escape;

/// Jepsen mode: each seed against the relay process (or URL); prints the seed, the plan and
/// the verdict, writes the histories, exits 1 on a violation.
pub(crate) fn jepsen(args: &Args) -> anyhow::Result<ExitCode> {
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
    if let Some(dir) = &args.report {
        pages::create_dir(dir)?;
    }
    println!(
        "Jepsen mode: real sockets and processes, NOT bit-deterministic (the seed fixes the scenario, the fault plan and the proxy's draws; timing differs between runs)"
    );
    let mut failed = Vec::new();
    let mut setup = Vec::new();
    let mut oracles_line = false;
    let mut reports = Vec::new();
    let mut rows = Vec::new();
    for seed in seeds.clone() {
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
        let page = jepsen_page(args, &report)?;
        rows.push(SummaryRow {
            seed,
            verdict: verdict_name(report.verdict).to_owned(),
            oracles: pages::by_oracle(report.violations.iter().map(|v| oracle_of(v))),
            page,
        });
        match report.verdict {
            jepsen::Verdict::Pass => {}
            jepsen::Verdict::Fail => failed.push(seed),
            jepsen::Verdict::Setup => setup.push(seed),
        }
        reports.push(report);
    }
    jepsen_files(args, &reports)?;
    if let Some(dir) = &args.report {
        let facts = [
            ("target".to_owned(), target_flag(args)),
            (
                "seeds".to_owned(),
                format!("{}..{}", seeds.start, seeds.end),
            ),
        ];
        let index = pages::write_index(dir, "simulate: Jepsen mode", &facts, &rows)?;
        println!("report: {}", index.display());
    }
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
        let should: Vec<u64> = reports
            .iter()
            .filter(|r| !r.should.is_empty())
            .map(|r| r.seed)
            .collect();
        if should.is_empty() {
            println!("verdict: pass: 0 violations");
        } else {
            println!(
                "verdict: pass: 0 violations (SHOULD findings in seeds {should:?}: what the documents recommend, not require)"
            );
        }
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
                    "frames": r.frames, "violations": r.violations, "should": r.should,
                    "plan": r.plan,
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
                jepsen::Verdict::Pass if r.should.is_empty() => xml.push_str("/>\n"),
                jepsen::Verdict::Pass => {
                    let should = xml_escape(&r.should.join("\n"));
                    let _ = writeln!(xml, "><system-out>SHOULD: {should}</system-out></testcase>");
                }
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
        "seed {seed}: verdict {:?}: {} accounts, {} of {} conversations, {} sent, {} acked ({} ack frames), {} received ({} msg frames), {} receipts, {} orders ({} paid), {} kills, {} pauses, {} proxy phases, {} stranger attempts, {} receipt probes, {} violation(s), {} SHOULD finding(s){written}",
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
        c.stranger_attempts,
        c.receipt_probes,
        report.violations.len(),
        report.should.len()
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
    for v in &report.should {
        println!("SHOULD seed {seed} {v} (recommended by the documents, not required)");
    }
    Ok(())
}

/// `pass`, `fail` or `setup`.
fn verdict_name(v: jepsen::Verdict) -> &'static str {
    match v {
        jepsen::Verdict::Pass => "pass",
        jepsen::Verdict::Fail => "fail",
        jepsen::Verdict::Setup => "setup",
    }
}

/// The oracle a violation line names (`[oracle] detail`, or the line's first word).
fn oracle_of(violation: &str) -> &str {
    violation
        .strip_prefix('[')
        .and_then(|rest| rest.split_once(']'))
        .map_or_else(
            || violation.split([' ', ':']).next().unwrap_or(violation),
            |(oracle, _)| oracle,
        )
}

/// The flag that names the relay under test, as the user gave it.
fn target_flag(args: &Args) -> String {
    match (&args.relay_cmd, &args.relay_url) {
        (Some(cmd), _) => format!("--relay-cmd '{}'", cmd.replace('\'', r"'\''")),
        (None, Some(url)) => format!("--relay-url {url}"),
        (None, None) => String::new(),
    }
}

/// With `--report`, writes the page of a seed that did not pass (with `--seed`, whatever its
/// verdict); whether it wrote one.
fn jepsen_page(args: &Args, report: &JepsenReport) -> anyhow::Result<bool> {
    let Some(dir) = &args.report else {
        return Ok(false);
    };
    if report.verdict == jepsen::Verdict::Pass && args.seed.is_none() {
        return Ok(false);
    }
    let again = format!("simulate {} --seed {}", target_flag(args), report.seed);
    pages::write_seed_page(dir, report.seed, &Timeline::from_jepsen(report, &again))?;
    Ok(true)
}
