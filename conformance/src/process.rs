//! The relay as a process the runner owns (`--relay-cmd`): started from a command template,
//! killed with `SIGKILL` and restarted on the same data directory by the DURABILITY cases.
//!
//! * `{listen}` becomes `127.0.0.1:PORT`, `{data}` a directory kept across restarts,
//!   `{payment_secret}` the payment webhook secret (also in the environment as
//!   `RELAY_PAYMENT_WEBHOOK_SECRET`).
//! * The port is one free when picked, drawn below the kernel's ephemeral range when it can be
//!   (`fault_proxy::ports::free_port`): an outgoing connection anywhere on the machine takes its source port from
//!   that range, so a port there can be taken between the pick and the relay's bind, or while
//!   the relay is down between a kill and its restart. The pick and the bind still race: a
//!   relay that exits before it listens is started again, on another port at the first start
//!   (up to [`START_ATTEMPTS`] times) and on the same port after a kill (up to
//!   [`RESTART_ATTEMPTS`] times, since the cases' clients know it).
//! * The command runs under `sh -c` in a process group of its own, so `kill -9` reaches the
//!   relay whether or not the command starts with `exec` (or is `cd dir && ./relay …`).
//! * The relay's output goes to `relay.log` next to the data directory; an error quotes its
//!   last lines.

use std::net::SocketAddr;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fault_proxy::ports::{Started, free_port, wait_closed, wait_listening};

/// How long a started relay may take to accept connections.
pub const RELAY_START_MS: u64 = 30_000;
/// Pause between two connection attempts while waiting for the relay.
const POLL_MS: u64 = 20;
/// [`RELAY_START_MS`] as a duration.
const START_WAIT: Duration = Duration::from_millis(RELAY_START_MS);
/// Lines of the relay's log quoted in an error.
const LOG_TAIL_LINES: usize = 12;
/// Starts tried, each on a new free port, while the relay exits before it listens: the port
/// the runner picked (bound and released) can be taken by another process before the relay
/// binds it.
pub const START_ATTEMPTS: u32 = 3;
/// Starts tried after a kill while the relay exits before it listens, on the same port.
pub const RESTART_ATTEMPTS: u32 = 5;
/// Pause before the second restart attempt; each later one waits twice as long.
const RESTART_BACKOFF_MS: u64 = 200;

/// Why the relay process could not be run. Each message says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The template lacks `{listen}`.
    #[error(
        "--relay-cmd has no {{listen}}: the runner picks a free port and puts `127.0.0.1:PORT` where {{listen}} is (e.g. --relay-cmd './relay --addr {{listen}} --db {{data}}/db')"
    )]
    NoListen,
    /// `sh` could not be started.
    #[error("cannot start `sh -c` for --relay-cmd: {0}")]
    Spawn(std::io::Error),
    /// A file or directory of the runner.
    #[error("{what}: {source}")]
    Io {
        /// What the runner was doing.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// The relay exited before it listened.
    #[error(
        "the relay command exited ({status}) before accepting connections on {listen}; check --relay-cmd (it must start a relay listening on {{listen}}). Its last output:\n{log}"
    )]
    Exited {
        /// Its exit status.
        status: String,
        /// Where it should have listened.
        listen: SocketAddr,
        /// The end of its log.
        log: String,
    },
    /// The relay did not listen in time.
    #[error(
        "the relay did not accept connections on {listen} within {RELAY_START_MS} ms; does the command listen on {{listen}}? Its last output:\n{log}"
    )]
    NotListening {
        /// Where it should listen.
        listen: SocketAddr,
        /// The end of its log.
        log: String,
    },
}

/// A relay process the runner owns.
#[derive(Debug)]
pub struct RelayProcess {
    template: String,
    secret: Option<String>,
    listen: SocketAddr,
    data: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    /// How many times it was killed and restarted.
    pub restarts: u32,
}

impl RelayProcess {
    /// Starts the relay of `template` with its data under `dir`, and waits until it listens.
    /// A relay that exits before it listens (e.g. its port was taken meanwhile) is started
    /// again on another free port, [`START_ATTEMPTS`] times in all; the last failure is
    /// returned.
    pub async fn start(
        template: &str,
        secret: Option<String>,
        dir: &Path,
    ) -> Result<Self, ProcessError> {
        if !template.contains("{listen}") {
            return Err(ProcessError::NoListen);
        }
        let io = |what: &str| {
            let what = what.to_owned();
            move |source| ProcessError::Io { what, source }
        };
        let data = dir.join("data");
        std::fs::create_dir_all(&data).map_err(io("creating the relay's data directory"))?;
        let mut process = Self {
            template: template.to_owned(),
            secret,
            listen: free_port().map_err(io("picking a free port on 127.0.0.1"))?,
            data,
            log: dir.join("relay.log"),
            child: None,
            restarts: 0,
        };
        let mut attempt = 1;
        loop {
            process.spawn()?;
            match process.wait_listening().await {
                Ok(()) => return Ok(process),
                Err(ProcessError::Exited { status, .. }) if attempt < START_ATTEMPTS => {
                    tracing::warn!(%status, listen = %process.listen, attempt,
                        "the relay exited before it listened; starting it again on another port");
                    process.child = None;
                    process.listen = free_port().map_err(io("picking a free port on 127.0.0.1"))?;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.listen)
    }

    /// The command as run (placeholders filled; the secret shown as `<secret>`).
    pub fn shown_command(&self) -> String {
        self.fill(Some("<secret>"))
    }

    fn fill(&self, secret: Option<&str>) -> String {
        self.template
            .replace("{listen}", &self.listen.to_string())
            .replace("{data}", &self.data.display().to_string())
            .replace(
                "{payment_secret}",
                secret.or(self.secret.as_deref()).unwrap_or_default(),
            )
    }

    fn spawn(&mut self) -> Result<(), ProcessError> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|source| ProcessError::Io {
                what: format!("opening {}", self.log.display()),
                source,
            })?;
        let err = log.try_clone().map_err(ProcessError::Spawn)?;
        let mut command = Command::new("sh");
        if let Some(secret) = &self.secret {
            command.env("RELAY_PAYMENT_WEBHOOK_SECRET", secret);
        }
        let child = command
            .arg("-c")
            .arg(self.fill(None))
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err))
            .process_group(0)
            .spawn()
            .map_err(ProcessError::Spawn)?;
        self.child = Some(child);
        Ok(())
    }

    /// Sends `signal` (e.g. `-KILL`) to the relay's whole process group.
    fn signal_group(&self, signal: &str) {
        if let Some(child) = &self.child {
            let group = format!("-{}", child.id());
            let status = Command::new("kill")
                .args([signal, "--", &group])
                .stderr(Stdio::null())
                .status();
            if let Err(e) = status {
                tracing::warn!(%e, signal, "could not signal the relay");
            }
        }
    }

    /// `kill -9` of the relay (its process group), then a start on the same data directory;
    /// returns once it listens again.
    pub async fn kill_and_restart(&mut self) -> Result<(), ProcessError> {
        self.kill();
        // The group's processes die asynchronously: start again once nothing listens.
        wait_closed(self.listen, START_WAIT, Duration::from_millis(POLL_MS)).await;
        self.restarts += 1;
        let mut attempt = 1;
        loop {
            self.spawn()?;
            match self.wait_listening().await {
                Err(ProcessError::Exited { status, .. }) if attempt < RESTART_ATTEMPTS => {
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

    /// `kill -9` of the relay's process group, and reaps it.
    pub fn kill(&mut self) {
        self.signal_group("-KILL");
        if let Some(mut child) = self.child.take() {
            drop(child.kill());
            drop(child.wait());
        }
    }
}

impl Drop for RelayProcess {
    /// The relay the runner started does not outlive it: its process group is killed (the
    /// group is its own, so neither the runner's exit nor a Ctrl-C would reach it).
    fn drop(&mut self) {
        self.kill();
    }
}

impl RelayProcess {
    /// The end of the relay's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let from = lines.len().saturating_sub(LOG_TAIL_LINES);
        if lines.is_empty() {
            "  (nothing)".to_owned()
        } else {
            lines[from..]
                .iter()
                .map(|l| format!("  {l}"))
                .collect::<Vec<_>>()
                .join("\n")
        }
    }

    /// Waits until `{listen}` accepts connections while the command runs. A command that
    /// exited with a failure is [`ProcessError::Exited`] even when something accepts on its
    /// port: that is another process's listener (the relay's bind failed), not the relay. A
    /// command that exited successfully while its port accepts (a relay that daemonizes) is
    /// started.
    async fn wait_listening(&mut self) -> Result<(), ProcessError> {
        let poll = Duration::from_millis(POLL_MS);
        match wait_listening(self.listen, self.child.as_mut(), START_WAIT, poll).await {
            Started::Listening => Ok(()),
            Started::Exited(status) => Err(ProcessError::Exited {
                status: status.to_string(),
                listen: self.listen,
                log: self.log_tail(),
            }),
            Started::NotListening => Err(ProcessError::NotListening {
                listen: self.listen,
                log: self.log_tail(),
            }),
        }
    }
}
