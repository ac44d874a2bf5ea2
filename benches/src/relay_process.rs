//! The release `relay` binary as a child process, measured from the outside as an operator
//! would: started on a free loopback port with the flags a bench needs, its resident memory
//! read from `/proc/<pid>/status`, its CPU time from `/proc/<pid>/stat`, its core task's busy
//! time from its metrics listener (a second free port), killed when dropped.
//!
//! Build it first: `cargo build --release -p relay-server --bin relay` (benches look for it next to
//! their own executable, in `target/release/`).

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::wall_now;

/// How long [`RelayProcess::spawn`] waits for the relay to accept connections.
const START_DEADLINE: Duration = Duration::from_secs(20);

/// `target/release/relay`, next to the running bench (`target/release/deps/<bench>-*`).
pub fn relay_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let path = exe.parent()?.parent()?.join("relay");
    path.exists().then_some(path)
}

/// A running `relay` process; dropping it kills the process.
#[derive(Debug)]
pub struct RelayProcess {
    child: Child,
    /// Where it listens (`127.0.0.1:port`).
    pub addr: SocketAddr,
    /// Where it serves its metrics (`--metrics-listen`).
    pub metrics_addr: SocketAddr,
}

/// What a relay process has used since it started ([`RelayProcess::usage`]).
#[derive(Debug, Clone)]
pub struct Usage {
    /// CPU time of the whole process (all threads, user and system).
    pub cpu_seconds: f64,
    /// Time each of its core tasks spent working, in shard order
    /// (`relay_core_busy_seconds_total`, by `shard`; one unlabelled sample from a relay older
    /// than that label; empty from a relay that does not export it).
    pub core_busy_seconds: Vec<f64>,
    /// Store commits and the time they took (`relay_store_commit_duration_seconds`'s count
    /// and sum; `None` from a relay that does not export it).
    pub commits: Option<(f64, f64)>,
    /// Rows the store commits wrote or deleted (`relay_store_commit_rows_sum`).
    pub commit_rows: Option<f64>,
}

impl Usage {
    /// What was used from `before` to `self`, as shares of `wall_seconds`: (cores of CPU the
    /// process used, fraction of the time each core task was busy, in shard order).
    pub fn shares_since(&self, before: &Self, wall_seconds: f64) -> (f64, Vec<f64>) {
        (
            (self.cpu_seconds - before.cpu_seconds) / wall_seconds,
            self.core_busy_seconds
                .iter()
                .zip(&before.core_busy_seconds)
                .map(|(now, then)| (now - then) / wall_seconds)
                .collect(),
        )
    }

    /// Store commits from `before` to `self`: how many, their mean duration in seconds, and
    /// the rows they wrote or deleted.
    pub fn commits_since(&self, before: &Self) -> Option<(f64, f64, f64)> {
        let ((count, sum), (count_before, sum_before)) = self.commits.zip(before.commits)?;
        let count = count - count_before;
        let rows = self.commit_rows.zip(before.commit_rows)?;
        Some((count, (sum - sum_before) / count.max(1.0), rows.0 - rows.1))
    }
}

/// Clock ticks per second of `/proc/<pid>/stat` (`USER_HZ`, 100 on Linux).
const USER_HZ: f64 = 100.0;

/// A free loopback port (the listener is dropped at once; the relay binds it next).
fn free_port() -> io::Result<SocketAddr> {
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port();
    Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
}

/// `GET path` over HTTP/1.0 (the connection closes after the answer): the whole answer.
fn http_get(addr: SocketAddr, path: &str) -> io::Result<String> {
    use std::io::{Read as _, Write as _};
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: relay\r\n\r\n").as_bytes())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

impl RelayProcess {
    /// Starts `binary --listen 127.0.0.1:<free port> --metrics-listen 127.0.0.1:<another>
    /// <args…>` (its output discarded but for warnings and errors on stderr) and waits until it
    /// accepts TCP connections.
    pub fn spawn(binary: &Path, args: &[&str]) -> io::Result<Self> {
        let addr = free_port()?;
        let metrics_addr = free_port()?;
        let child = Command::new(binary)
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--metrics-listen")
            .arg(metrics_addr.to_string())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()?;
        let mut process = Self {
            child,
            addr,
            metrics_addr,
        };
        let start = wall_now();
        loop {
            if TcpStream::connect(addr).is_ok() {
                return Ok(process);
            }
            if let Some(status) = process.child.try_wait()? {
                return Err(io::Error::other(format!("relay exited at start: {status}")));
            }
            if start.elapsed() > START_DEADLINE {
                return Err(io::Error::other("relay did not start listening in time"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until `GET /readyz` answers 200: a relay on PostgreSQL listens at once but serves
    /// only once it leads.
    pub fn wait_ready(&mut self) -> io::Result<()> {
        let start = wall_now();
        loop {
            let ready = http_get(self.addr, "/readyz").map(|answer| {
                answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.0 200")
            });
            if matches!(ready, Ok(true)) {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                return Err(io::Error::other(format!("relay exited at start: {status}")));
            }
            if start.elapsed() > START_DEADLINE {
                return Err(io::Error::other("relay did not become ready in time"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// CPU time and core busy time so far (read from `/proc` and the metrics listener).
    pub fn usage(&self) -> io::Result<Usage> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))?;
        let cpu_seconds = parse_cpu_ticks(&stat)
            .ok_or_else(|| io::Error::other("unreadable stat"))? as f64
            / USER_HZ;
        let metrics = http_get(self.metrics_addr, "/metrics")?;
        let mut core_busy_seconds: Vec<f64> =
            parse_by_label(&metrics, "relay_core_busy_seconds_total", "shard")
                .into_iter()
                .map(|(_, v)| v)
                .collect();
        if core_busy_seconds.is_empty() {
            core_busy_seconds.extend(parse_sample(&metrics, "relay_core_busy_seconds_total"));
        }
        let commits = parse_sample(&metrics, "relay_store_commit_duration_seconds_count").zip(
            parse_sample(&metrics, "relay_store_commit_duration_seconds_sum"),
        );
        Ok(Usage {
            cpu_seconds,
            core_busy_seconds,
            commits,
            commit_rows: parse_sample(&metrics, "relay_store_commit_rows_sum"),
        })
    }

    /// Resident set size in bytes (`VmRSS` of `/proc/<pid>/status`).
    pub fn rss_bytes(&self) -> io::Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        parse_vm_rss(&status).ok_or_else(|| io::Error::other("no VmRSS line"))
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// User plus system clock ticks of a `/proc/<pid>/stat` line (fields 14 and 15; the command
/// name before them is in parentheses and may hold spaces).
pub fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (the state).
    let utime: u64 = fields.get(14 - 3)?.parse().ok()?;
    let stime: u64 = fields.get(15 - 3)?.parse().ok()?;
    Some(utime + stime)
}

/// The value of the unlabelled sample `name` in a metrics exposition.
pub fn parse_sample(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(name)?.strip_prefix(' ')?;
        value.split_whitespace().next()?.parse().ok()
    })
}

/// The samples of `name` labelled with a numeric `label` alone, in the label's order.
pub fn parse_by_label(text: &str, name: &str, label: &str) -> Vec<(u64, f64)> {
    let prefix = format!("{name}{{{label}=\"");
    let mut found: Vec<(u64, f64)> = text
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(prefix.as_str())?;
            let (key, rest) = rest.split_once("\"} ")?;
            Some((
                key.parse().ok()?,
                rest.split_whitespace().next()?.parse().ok()?,
            ))
        })
        .collect();
    found.sort_by_key(|(key, _)| *key);
    found
}

/// The `VmRSS:  1234 kB` line of a `/proc/<pid>/status`, in bytes.
pub fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line
        .trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::{parse_by_label, parse_cpu_ticks, parse_sample, parse_vm_rss};

    #[test]
    fn cpu_ticks_are_user_plus_system() {
        let stat = "4242 (relay (x) y) S 1 4242 4242 0 -1 4194560 900 0 0 0 157 43 0 0 20 0 9 0";
        assert_eq!(parse_cpu_ticks(stat), Some(200));
        assert_eq!(parse_cpu_ticks("4242 (relay) S 1"), None);
    }

    #[test]
    fn a_sample_is_read_by_its_whole_name() {
        let text = "# TYPE relay_core_busy_seconds counter\nrelay_core_busy_seconds_total_x 9\n\
                    relay_core_busy_seconds_total 1.25\n# EOF\n";
        assert_eq!(
            parse_sample(text, "relay_core_busy_seconds_total"),
            Some(1.25)
        );
        assert_eq!(parse_sample(text, "relay_core"), None);
    }

    #[test]
    fn samples_are_read_by_label_in_its_order() {
        let text = "# TYPE relay_core_busy_seconds counter\n\
                    relay_core_busy_seconds_total{shard=\"10\"} 3.5\n\
                    relay_core_busy_seconds_total{shard=\"2\"} 1.25\n\
                    relay_core_busy_seconds_total{shard=\"x\"} 9\n\
                    relay_core_busy_seconds_total_x{shard=\"1\"} 9\n# EOF\n";
        assert_eq!(
            parse_by_label(text, "relay_core_busy_seconds_total", "shard"),
            [(2, 1.25), (10, 3.5)]
        );
    }

    #[test]
    fn vm_rss_is_read_in_bytes() {
        let status = "Name:\trelay\nVmPeak:\t  9000 kB\nVmRSS:\t   11264 kB\nThreads:\t3\n";
        assert_eq!(parse_vm_rss(status), Some(11_264 * 1024));
        assert_eq!(parse_vm_rss("Name:\trelay\n"), None);
    }
}
