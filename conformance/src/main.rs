//! `conformance`: checks a SecureChat relay against SPEC.md and PROTOCOL.md, case by case.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Parser;
use conformance::ctx::{ClockControl, Hooks, PushProbe, Shared};
#[cfg(feature = "embedded")]
use conformance::embedded;
use conformance::runner::{self, RunConfig, Status};
use conformance::transport::NetTransport;
use conformance::{cases, report, transport};
use indicatif::{ProgressBar, ProgressStyle};
use seam::clock::SystemClock;
use seam::net::{Endpoint, Network as _, Tokio, TokioConnector};
use standins::WebPushService;

/// Black-box conformance suite for SecureChat relays.
///
/// Without --relay it starts our relay in-process on 127.0.0.1 (memory store, low PoW difficulty,
/// a known payment webhook secret and the test clock), so every hook is available.
/// Exit code: 0 when no MUST case failed unexpectedly, 1 otherwise, 2 on a usage or setup error.
#[derive(Debug, Parser)]
#[command(name = "conformance", version)]
struct Cli {
    /// Base URL of the relay to check (`http://host:port`). Default: start the embedded relay.
    #[arg(long)]
    relay: Option<String>,
    /// Cases run at once.
    #[arg(long, default_value_t = 4)]
    jobs: usize,
    /// Per-case timeout in seconds.
    #[arg(long, default_value_t = 30)]
    timeout_secs: u64,
    /// How long to wait for an expected response or frame, in milliseconds.
    #[arg(long, default_value_t = 5000)]
    wait_ms: u64,
    /// How long to watch for a frame that must not arrive, in milliseconds.
    #[arg(long, default_value_t = 400)]
    quiet_ms: u64,
    /// Run only these ids or id prefixes (repeatable, or comma-separated): `--only MSG,E2EE-002`.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Skip these ids or id prefixes.
    #[arg(long, value_delimiter = ',')]
    skip: Vec<String>,
    /// Expected failures: one `ID reason` per line (`#` comments); every entry needs a reason.
    #[arg(long)]
    expected_failures: Option<PathBuf>,
    /// The payment webhook's HMAC secret: the runner acts as the payment processor.
    #[arg(long)]
    payment_secret: Option<String>,
    /// The relay offers the test clock `POST /api/v1/test/advance-clock` (see README.md).
    #[arg(long)]
    clock_hook: bool,
    /// Act as a Web Push service listening at URL (`http://127.0.0.1:PORT`): cases subscribe
    /// with endpoints under it and check what the relay delivers. The relay must accept and
    /// deliver to `http://` endpoints (its test mode; see README.md).
    #[arg(long, value_name = "URL")]
    push_probe: Option<String>,
    /// Seed of the accounts' mnemonics and message ids.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Write the JSON report here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the JUnit XML report here.
    #[arg(long)]
    junit: Option<PathBuf>,
    /// Write the HTML report here.
    #[arg(long)]
    html: Option<PathBuf>,
    /// Network faults on every case's connections, through a fault proxy per case in this
    /// process: `none`, `all`, toxic names (`latency,bandwidth,slicer,timeout,reset_peer,
    /// limit_data,hold,half_open`, defaults, both directions) or a JSON plan (`@FILE` reads
    /// one). Cases that move the relay's clock are skipped. Each case's plan, seed and per-
    /// connection draws go into the JSON, JUnit and HTML reports. A case that fails after a
    /// destructive toxic (timeout, reset_peer, limit_data, half_open) was drawn is run once
    /// more without them; its report keeps the first attempt. `all` draws the destructive
    /// toxics on about one connection in ten each.
    #[arg(long, default_value = "none")]
    faults: String,
    /// Seed of the fault draws; case number `i` of the selection uses `SEED + i` (its report
    /// shows it: rerun one case with `--only ID --fault-seed <that seed>`).
    #[arg(long, default_value_t = 0)]
    fault_seed: u64,
    /// List the selected cases and exit.
    #[arg(long)]
    list: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// Starts the push probe's Web Push service at `url` (it serves until the process exits).
async fn start_push_probe(url: &str) -> anyhow::Result<PushProbe> {
    let endpoint = Endpoint::parse(url).context("parsing --push-probe")?;
    let addr = std::net::ToSocketAddrs::to_socket_addrs(&(endpoint.host(), endpoint.port()))
        .with_context(|| format!("resolving {url}"))?
        .next()
        .with_context(|| format!("{url} has no address"))?;
    let service = WebPushService::new(0x5eed, Arc::new(SystemClock));
    let listener = Tokio::bind(addr)
        .await
        .with_context(|| format!("listening on {addr} for --push-probe"))?;
    let router = service.router();
    tokio::spawn(async move {
        if let Err(e) = seam::net::serve(listener, router, std::future::pending()).await {
            eprintln!("push probe stopped: {e}");
        }
    });
    Ok(PushProbe {
        base: endpoint.to_string(),
        service,
    })
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match rt.block_on(run(cli)) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<bool> {
    let expected = match &cli.expected_failures {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            runner::parse_expected_failures(&text).map_err(anyhow::Error::msg)?
        }
        None => Default::default(),
    };
    let cfg = RunConfig {
        jobs: cli.jobs,
        timeout: Duration::from_secs(cli.timeout_secs),
        only: cli.only.clone(),
        skip: cli.skip.clone(),
        expected,
    };
    let selected = runner::select(cases::all(), &cfg);
    if cli.list {
        for c in &selected {
            println!(
                "{:<12} {:<6} {:<32} {}",
                c.id, c.level, c.source, c.statement
            );
        }
        return Ok(true);
    }
    #[cfg(feature = "embedded")]
    type Embedded = Option<embedded::EmbeddedRelay>;
    #[cfg(not(feature = "embedded"))]
    type Embedded = Option<std::convert::Infallible>;
    let (_embedded, base_url, mut hooks): (Embedded, String, Hooks) = match &cli.relay {
        Some(url) => (None, url.clone(), Hooks::default()),
        #[cfg(not(feature = "embedded"))]
        None => anyhow::bail!(
            "this build has no embedded relay: give the relay to check with --relay URL \
             (or build with the default feature `embedded`)"
        ),
        #[cfg(feature = "embedded")]
        None => {
            let relay = embedded::start_loopback()
                .await
                .map_err(anyhow::Error::msg)?;
            let url = relay.base_url.clone();
            // The embedded relay delivers Web Push: be its push service unless told where.
            let hooks = if cli.push_probe.is_some() {
                embedded::hooks()
            } else {
                embedded::loopback_hooks()
                    .await
                    .map_err(anyhow::Error::msg)?
            };
            (Some(relay), url, hooks)
        }
    };
    if let Some(secret) = &cli.payment_secret {
        hooks.payment_secret = Some(secret.as_bytes().to_vec());
    }
    if cli.clock_hook {
        hooks.clock = Some(ClockControl::Http);
    }
    if let Some(url) = &cli.push_probe {
        hooks.push_probe = Some(start_push_probe(url).await?);
    }
    let endpoint = Endpoint::parse(&base_url).context("parsing --relay")?;
    let local = matches!(endpoint.host(), "127.0.0.1" | "localhost");
    let plan = match cli.faults.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?,
        None => cli.faults.clone(),
    };
    let plan = fault_proxy::Plan::parse(&plan).context("--faults")?;
    let transports = if !plan.toxics.is_empty() {
        let upstream =
            std::net::ToSocketAddrs::to_socket_addrs(&(endpoint.host(), endpoint.port()))
                .with_context(|| format!("resolving {base_url}"))?
                .find(std::net::SocketAddr::is_ipv4)
                .with_context(|| format!("{base_url} has no IPv4 address"))?;
        eprintln!(
            "faults: {} (seed {} + case number)",
            serde_json::to_string(&plan)?,
            cli.fault_seed
        );
        transport::faulted_factory(endpoint, upstream, plan, cli.fault_seed)
    } else if local {
        transport::loopback_factory(endpoint)
    } else {
        transport::shared_factory(NetTransport::new(TokioConnector, endpoint).shared())
    };
    let shared = Arc::new(Shared::new(
        hooks,
        cli.seed,
        Duration::from_millis(cli.wait_ms),
        Duration::from_millis(cli.quiet_ms),
    ));
    if selected.is_empty() {
        bail!("no case selected");
    }
    let bar = if cli.quiet {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::new(selected.len() as u64);
        if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} {msg}") {
            bar.set_style(style);
        }
        bar
    };
    let on_done = |r: &runner::CaseReport| {
        if r.status == Status::Fail || r.status == Status::UnexpectedPass {
            bar.println(format!(
                "{} {} {}",
                r.status.label(),
                r.id,
                r.reason.as_deref().unwrap_or("")
            ));
        }
        bar.set_message(r.id);
        bar.inc(1);
    };
    let reports = runner::run(&selected, transports, shared, &cfg, &on_done).await;
    bar.finish_and_clear();
    print!("{}", report::summary(&reports, &base_url));
    for (path, text) in [
        (&cli.json, report::json(&reports, &base_url)),
        (&cli.junit, report::junit(&reports)),
        (&cli.html, report::html(&reports, &base_url)),
    ] {
        if let Some(path) = path {
            std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok(!runner::must_failed(&reports))
}
