//! The processes and sockets the harness controls: the relay process (started from its
//! command template, `kill -9`ed and restarted on the same data directory, `SIGSTOP`ped and
//! `SIGCONT`inued) or a relay someone else runs, and the fault proxy in front of it.

use std::net::SocketAddr;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fault_proxy::ports::{self, Started, free_port, wait_closed};
use fault_proxy::{FaultProxy, Plan};

use super::{JepsenConfig, JepsenError, RELAY_START_MS, RelayTarget};
use seam::net::Endpoint;

/// Pause between two attempts to connect to the relay (or to bind the proxy again).
const POLL_MS: u64 = 20;
/// [`RELAY_START_MS`] as a duration.
const START_WAIT: Duration = Duration::from_millis(RELAY_START_MS);
/// Attempts to bind the proxy's port again for a new phase.
const PROXY_BIND_ATTEMPTS: u32 = 100;
/// Starts of the relay tried, each on a new port, while it exits before it listens (its port,
/// picked free, was taken before its bind).
const START_ATTEMPTS: u32 = 3;
/// Starts tried after a kill, on the same port (the proxy forwards there), while the relay
/// exits before it listens.
const RESTART_ATTEMPTS: u32 = 5;
/// Pause before the second restart attempt; each later one waits twice as long.
const RESTART_BACKOFF_MS: u64 = 200;

/// A relay process the harness owns.
pub(super) struct RelayProcess {
    template: String,
    payment_secret: Option<String>,
    listen: SocketAddr,
    data: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    paused: bool,
    /// Restarts after a `kill -9`.
    pub(super) restarts: u32,
}

impl RelayProcess {
    fn spawn(&mut self) -> Result<(), JepsenError> {
        let cmd = self
            .template
            .replace("{listen}", &self.listen.to_string())
            .replace("{data}", &self.data.display().to_string())
            .replace(
                "{payment_secret}",
                self.payment_secret.as_deref().unwrap_or_default(),
            );
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        // A process group of its own: kill -9, SIGSTOP and SIGCONT go to the whole group, so
        // they reach the relay whether or not the command `exec`s it (or is `cd d && ./relay`).
        let mut command = Command::new("sh");
        if let Some(secret) = &self.payment_secret {
            command.env("RELAY_PAYMENT_WEBHOOK_SECRET", secret);
        }
        let child = command
            .arg("-c")
            .arg(cmd)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .process_group(0)
            .spawn()?;
        self.child = Some(child);
        Ok(())
    }

    /// Sends `sig` to the relay's process group; whether it was delivered.
    fn signal(&self, sig: &str) -> bool {
        let Some(child) = &self.child else {
            return false;
        };
        let group = format!("-{}", child.id());
        let status = Command::new("kill")
            .args([sig, "--", &group])
            .stderr(Stdio::null())
            .status();
        match status {
            Ok(status) => status.success(),
            Err(e) => {
                tracing::warn!(%e, sig, "could not signal the relay");
                false
            }
        }
    }

    fn kill9(&mut self) {
        self.signal("-KILL");
        if let Some(mut child) = self.child.take() {
            drop(child.kill());
            drop(child.wait());
        }
        self.paused = false;
    }

    /// `kill -9`, then a restart on the same data directory after `down_ms` (and once the
    /// killed relay's port is closed); returns once it listens. A restart that exits before
    /// it listens (its port taken while it was down) is tried again on the same port, up to
    /// [`RESTART_ATTEMPTS`] times.
    pub(super) async fn kill_and_restart(&mut self, down_ms: u64) -> Result<(), JepsenError> {
        self.kill9();
        tokio::time::sleep(Duration::from_millis(down_ms)).await;
        wait_closed(self.listen, START_WAIT, Duration::from_millis(POLL_MS)).await;
        self.restarts += 1;
        let mut attempt = 1;
        loop {
            self.spawn()?;
            match self.wait_started().await {
                Err(JepsenError::RelayExited { status, .. }) if attempt < RESTART_ATTEMPTS => {
                    let pause = RESTART_BACKOFF_MS << (attempt - 1);
                    tracing::warn!(%status, listen = %self.listen, attempt, pause_ms = pause,
                        "the restarted relay exited before it listened; starting it again on its port");
                    self.child = None;
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    /// Waits until the relay accepts connections on its port while its command runs. A
    /// command that exited with a failure is [`JepsenError::RelayExited`] even when something
    /// accepts on the port: another process's listener (the relay's bind failed), not the
    /// relay; one that exited successfully while its port accepts (a relay that daemonizes)
    /// is started.
    async fn wait_started(&mut self) -> Result<(), JepsenError> {
        let poll = Duration::from_millis(POLL_MS);
        match ports::wait_listening(self.listen, self.child.as_mut(), START_WAIT, poll).await {
            Started::Listening => Ok(()),
            Started::Exited(status) => Err(JepsenError::RelayExited {
                status: status.to_string(),
                listen: self.listen,
                log: self.log_tail(),
            }),
            Started::NotListening => Err(JepsenError::RelayNotListening { addr: self.listen }),
        }
    }

    /// `SIGSTOP`, then `SIGCONT` after `for_ms`; whether the pause happened.
    pub(super) async fn pause(&mut self, for_ms: u64) -> bool {
        let stopped = self.signal("-STOP");
        self.paused = stopped;
        tokio::time::sleep(Duration::from_millis(for_ms)).await;
        self.signal("-CONT");
        self.paused = false;
        stopped
    }

    /// The end of the relay's log.
    pub(super) fn log_tail(&self) -> String {
        log_tail(&self.log)
    }

    fn exited(&mut self) -> Option<String> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            _ => None,
        }
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        if self.paused {
            self.signal("-CONT");
        }
        self.kill9();
    }
}

/// The relay of a run: `(its address, the process if the harness owns one, the target as
/// given)`. A relay the harness starts keeps its data in `dir` and listens when this returns;
/// one that exits before it listens is started again on another port, up to
/// [`START_ATTEMPTS`] times.
pub(super) async fn start_relay(
    config: &JepsenConfig,
    dir: &Path,
) -> Result<(SocketAddr, Option<RelayProcess>, String), JepsenError> {
    match &config.target {
        RelayTarget::Command(template) => {
            if !template.contains("{listen}") {
                return Err(JepsenError::NoListen);
            }
            let data = dir.join("data");
            std::fs::create_dir_all(&data)?;
            let mut process = RelayProcess {
                template: template.clone(),
                payment_secret: config.payment_secret.clone(),
                listen: free_port()?,
                data,
                log: dir.join("relay.log"),
                child: None,
                paused: false,
                restarts: 0,
            };
            let mut attempt = 1;
            loop {
                process.spawn()?;
                match process.wait_started().await {
                    Ok(()) => break,
                    Err(JepsenError::RelayExited { status, .. }) if attempt < START_ATTEMPTS => {
                        tracing::warn!(%status, listen = %process.listen, attempt,
                            "the relay exited before it listened; starting it again on another port");
                        process.child = None;
                        process.listen = free_port()?;
                        attempt += 1;
                    }
                    Err(e) => return Err(e),
                }
            }
            Ok((
                process.listen,
                Some(process),
                format!("--relay-cmd {template}"),
            ))
        }
        RelayTarget::Url(url) => {
            let bad = |why: String| JepsenError::BadUrl {
                url: url.clone(),
                why,
            };
            let endpoint = Endpoint::parse(url).map_err(|e| bad(e.to_string()))?;
            let addr: SocketAddr = tokio::net::lookup_host((endpoint.host(), endpoint.port()))
                .await?
                .next()
                .ok_or_else(|| bad("no address".to_owned()))?;
            Ok((addr, None, format!("--relay-url {url}")))
        }
    }
}

/// Waits until the relay accepts connections on `addr` (a relay process that exits
/// meanwhile is an error, with its log).
pub(super) async fn wait_listening(
    addr: SocketAddr,
    relay: &mut Option<RelayProcess>,
) -> Result<(), JepsenError> {
    for _ in 0..RELAY_START_MS / POLL_MS {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return Ok(());
        }
        if let Some(r) = relay.as_mut()
            && let Some(status) = r.exited()
        {
            return Err(JepsenError::RelayExited {
                status,
                listen: addr,
                log: r.log_tail(),
            });
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    Err(JepsenError::RelayNotListening { addr })
}

/// The last lines of the relay's log, indented.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    if lines.is_empty() {
        return "  (nothing)".to_owned();
    }
    lines[lines.len().saturating_sub(12)..]
        .iter()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The proxy, restarted on the same port for each phase.
pub(super) struct Proxy {
    listen: SocketAddr,
    upstream: SocketAddr,
    seed: u64,
    phase: u64,
    running: Option<FaultProxy>,
}

impl Proxy {
    /// A proxy on a free port in front of `upstream`, forwarding without faults.
    pub(super) async fn start(upstream: SocketAddr, seed: u64) -> Result<Self, JepsenError> {
        let mut proxy = Self {
            listen: free_port()?,
            upstream,
            seed,
            phase: 0,
            running: None,
        };
        proxy.set(Plan::none()).await?;
        Ok(proxy)
    }

    /// The base URL clients reach the relay by.
    pub(super) fn endpoint(&self) -> Endpoint {
        Endpoint::parse(&format!("http://{}", self.listen))
            .unwrap_or_else(|e| unreachable!("a socket address is a valid base URL: {e}"))
    }

    /// Starts a new phase with `toxics` (a comma list; `None`: no faults): every connection
    /// through the proxy is cut.
    pub(super) async fn set_toxics(&mut self, toxics: Option<&str>) -> Result<(), JepsenError> {
        let plan = toxics.map_or_else(Plan::none, |names| {
            Plan::parse(names).unwrap_or_else(|_| Plan::none())
        });
        self.set(plan).await
    }

    async fn set(&mut self, plan: Plan) -> Result<(), JepsenError> {
        // Dropping the running proxy cuts every connection through it.
        self.running = None;
        self.phase += 1;
        let seed = self.seed.wrapping_mul(1_000).wrapping_add(self.phase);
        for _ in 0..PROXY_BIND_ATTEMPTS {
            match FaultProxy::start(self.listen, self.upstream, plan.clone(), seed).await {
                Ok(p) => {
                    self.running = Some(p);
                    return Ok(());
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(POLL_MS)).await,
            }
        }
        Err(JepsenError::ProxyBind { addr: self.listen })
    }
}
