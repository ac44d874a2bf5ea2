//! The runner's command line as a library ([`main`]): the `conformance` binary is
//! `cli::main(&[])`, and a relay team's runner is the same with its own cases registered after
//! the built-in ones (README "Add your own conformance case").

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::ctx::{ClockControl, Hooks, Limits, PushProbe, Shared};
#[cfg(feature = "embedded")]
use crate::embedded;
use crate::model::Case;
use crate::model::Profile;
use crate::process::RelayProcess;
use crate::runner::{self, RunConfig, Status};
use crate::transport::NetTransport;
use crate::{cases, report, transport};
use anyhow::{Context as _, bail};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use seam::clock::SystemClock;
use seam::net::{Endpoint, Network as _, Tokio, TokioConnector};
use standins::WebPushService;

/// Black-box conformance suite for SecureChat relays.
///
/// Checks a relay by URL (--relay), or a relay process it starts, kills and restarts
/// (--relay-cmd: adds the DURABILITY cases), or, with neither, our relay in-process.
/// Profiles: `documents` (default) holds the relay to what SPEC.md and PROTOCOL.md require;
/// `reference` also to our relay's own choices. Every case is pass, fail, error (a setup step
/// failed: not checked), skip (with the reason and how to enable it) or an expected failure.
/// Exit code: 0 when no MUST case failed or errored, 1 otherwise, 2 on a usage or setup error.
#[derive(Debug, Parser)]
#[command(name = "conformance", version)]
struct Cli {
    /// Base URL of the relay to check (`http://host:port`). Default: start the embedded relay.
    #[arg(long, conflicts_with = "relay_cmd")]
    relay: Option<String>,
    /// Start the relay to check from this command (run by `sh -c`, with or without `exec`):
    /// `{listen}` becomes `127.0.0.1:PORT`, `{data}` a data directory kept across restarts,
    /// `{payment_secret}` the payment webhook secret (also `RELAY_PAYMENT_WEBHOOK_SECRET` in its
    /// environment). Adds the DURABILITY cases, which kill -9 and restart it.
    #[arg(long, value_name = "CMD")]
    relay_cmd: Option<String>,
    /// `documents`: what SPEC.md and PROTOCOL.md require (statuses they do not give are any
    /// 4xx, error codes in `error` or `code`); `reference`: our relay's own choices too
    /// (error body `{error, message}`, its statuses, codes and limits, channel versions).
    #[arg(long, default_value = "documents")]
    profile: Profile,
    /// The relay's largest WebSocket frame in bytes (WS-012; the documents give none).
    #[arg(long, value_name = "BYTES")]
    max_frame_bytes: Option<usize>,
    /// The relay's largest `msg` payload in bytes (MSG-014; the documents give none).
    #[arg(long, value_name = "BYTES")]
    max_payload_bytes: Option<usize>,
    /// The relay's largest JSON request body in bytes (ERR-014; the documents give none).
    #[arg(long, value_name = "BYTES")]
    max_body_bytes: Option<usize>,
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
    /// The payment webhook's HMAC secret: the runner acts as the payment processor. With
    /// --relay-cmd the runner makes one up unless given.
    #[arg(long, env = "CONFORMANCE_PAYMENT_SECRET", hide_env_values = true)]
    payment_secret: Option<String>,
    /// The relay offers the test clock `POST /api/v1/test/advance-clock` (see README.md).
    #[arg(long)]
    clock_hook: bool,
    /// Act as a Web Push service listening at URL (`http://127.0.0.1:PORT`): cases subscribe
    /// with endpoints under it and check what the relay delivers. The relay must accept and
    /// deliver to `http://` endpoints (its test mode; see README.md).
    #[arg(long, value_name = "URL")]
    push_probe: Option<String>,
    /// Seed of the accounts' mnemonics and message ids. By default a new one is drawn for
    /// every run (and printed), so that a run against a relay that kept an earlier run's
    /// accounts registers accounts of its own; give the printed one to repeat a run exactly
    /// (against a fresh relay: the same seed registers the same accounts again).
    #[arg(long)]
    seed: Option<u64>,
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

/// The `conformance` binary's `main`, with `extra` cases registered after the built-in ones
/// (`&[]`: the built-in suite alone). A relay team's own runner is this with its cases:
///
/// ```no_run
/// # static MY_CASES: &[conformance::model::Case] = &[];
/// fn main() -> std::process::ExitCode {
///     conformance::cli::main(&[MY_CASES])
/// }
/// ```
///
/// The extra cases are checked first ([`cases::with`]): a malformed or duplicate id is a usage
/// error (exit code 2). Everything else is the built-in runner's: the flags, the selection
/// (`--only`, `--skip`), the profiles, the hooks, the reports and the exit code.
pub fn main(extra: &[&[Case]]) -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let registry = match cases::with(extra) {
        Ok(registry) => registry,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
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
    match rt.block_on(run(cli, &registry)) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

async fn run(cli: Cli, registry: &[Case]) -> anyhow::Result<bool> {
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
    let selected = runner::select(registry, &cfg);
    if cli.list {
        for c in &selected {
            println!(
                "{:<12} {:<6} {:<32} {}",
                c.id, c.level, c.source, c.statement
            );
        }
        return Ok(true);
    }
    let seed = match cli.seed {
        Some(seed) => seed,
        None => getrandom::u64().context("reading OS randomness for the accounts' seed")?,
    };
    eprintln!("accounts seed {seed} (--seed {seed} repeats this run, against a fresh relay)");
    #[cfg(feature = "embedded")]
    type Embedded = Option<embedded::EmbeddedRelay>;
    #[cfg(not(feature = "embedded"))]
    type Embedded = Option<std::convert::Infallible>;
    let relay_dir = tempfile::tempdir().context("creating a directory for the relay's data")?;
    let mut secret = cli.payment_secret.clone();
    let (_embedded, base_url, mut hooks): (Embedded, String, Hooks) =
        match (&cli.relay, &cli.relay_cmd) {
            (Some(url), _) => (None, url.clone(), Hooks::default()),
            (None, Some(cmd)) => {
                // Drawn apart from the accounts seed, which is printed.
                let made_up = match &secret {
                    Some(given) => given.clone(),
                    None => format!(
                        "conformance-{:016x}{:016x}",
                        getrandom::u64().context("reading OS randomness for the webhook secret")?,
                        getrandom::u64().context("reading OS randomness for the webhook secret")?
                    ),
                };
                secret = Some(made_up.clone());
                let process = RelayProcess::start(cmd, Some(made_up), relay_dir.path()).await?;
                eprintln!("relay started: {}", process.shown_command());
                let url = process.base_url();
                let hooks = Hooks {
                    process: Some(Arc::new(tokio::sync::Mutex::new(process))),
                    ..Hooks::default()
                };
                (None, url, hooks)
            }
            #[cfg(not(feature = "embedded"))]
            (None, None) => anyhow::bail!(
                "this build has no embedded relay: give the relay to check with --relay URL \
             (or build with the default feature `embedded`)"
            ),
            #[cfg(feature = "embedded")]
            (None, None) => {
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
    if let Some(secret) = &secret {
        hooks.payment_secret = Some(secret.as_bytes().to_vec());
    }
    if cli.clock_hook {
        hooks.clock = Some(ClockControl::Http);
    }
    if let Some(url) = &cli.push_probe {
        hooks.push_probe = Some(start_push_probe(url).await?);
    }
    let endpoint = Endpoint::parse(&base_url).with_context(|| {
        format!("--relay {base_url:?} is not a base URL: give http://HOST:PORT")
    })?;
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
    let limits = Limits {
        max_frame_bytes: cli.max_frame_bytes,
        max_payload_bytes: cli.max_payload_bytes,
        max_body_bytes: cli.max_body_bytes,
    };
    let shared = Arc::new(
        Shared::new(
            hooks,
            seed,
            Duration::from_millis(cli.wait_ms),
            Duration::from_millis(cli.quiet_ms),
        )
        .with_limits(limits)
        .with_profile(cli.profile),
    );
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
        if matches!(
            r.status,
            Status::Fail | Status::UnexpectedPass | Status::Error
        ) {
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
    print!("{}", report::summary(&reports, &base_url, cli.profile));
    for (path, text) in [
        (&cli.json, report::json(&reports, &base_url, cli.profile)),
        (&cli.junit, report::junit(&reports)),
        (&cli.html, report::html(&reports, &base_url, cli.profile)),
    ] {
        if let Some(path) = path {
            std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok(!runner::must_failed(&reports))
}
