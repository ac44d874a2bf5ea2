//! `fault-proxy`: a seeded TCP fault proxy in front of any relay (or any TCP service).

use std::net::SocketAddr;

use anyhow::Context as _;
use clap::Parser;
use fault_proxy::{FaultProxy, Plan, TOXIC_NAMES};

/// Forwards every connection from LISTEN to UPSTREAM through a fault plan, with toxiproxy's
/// toxics (latency, bandwidth, slicer, timeout, reset_peer, limit_data) plus hold and half_open.
/// Which toxics a connection gets is drawn from the seed and its accept index; each accepted
/// connection's toxics are logged at debug level.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Address to accept clients on (e.g. 127.0.0.1:9080).
    #[arg(long)]
    listen: SocketAddr,
    /// Address of the service the connections go to (e.g. 127.0.0.1:8080).
    #[arg(long)]
    upstream: SocketAddr,
    /// `none`, `all`, a comma-separated list of toxic names (defaults, both directions, every
    /// connection), or a JSON plan `{"toxics":[{"type":"latency","latency_ms":50,
    /// "jitter_ms":10,"stream":"downstream","toxicity":0.5}]}`, or `@FILE` holding one.
    #[arg(long, default_value = "none")]
    faults: String,
    /// Seed of the per-connection draws.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// `tracing` filter for the logs on stderr.
    #[arg(long, default_value = "info")]
    log: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(&args.log))
        .with_writer(std::io::stderr)
        .init();
    let text = match args.faults.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?,
        None => args.faults.clone(),
    };
    let plan = Plan::parse(&text)
        .with_context(|| format!("--faults (toxics: {})", TOXIC_NAMES.join(", ")))?;
    let proxy = FaultProxy::start(args.listen, args.upstream, plan.clone(), args.seed).await?;
    tracing::info!(
        listen = %proxy.local_addr(),
        upstream = %args.upstream,
        seed = args.seed,
        plan = %serde_json::to_string(&plan)?,
        "fault proxy running"
    );
    tokio::signal::ctrl_c().await?;
    tracing::info!(
        connections = proxy.connections().len(),
        "fault proxy stopped"
    );
    Ok(())
}
