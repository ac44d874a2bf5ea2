//! The release `relay` binary as a child process, measured from the outside as an operator
//! would: started on a free loopback port with the flags a bench needs, its resident memory
//! read from `/proc/<pid>/status`, killed when dropped.
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
}

impl RelayProcess {
    /// Starts `binary --listen 127.0.0.1:<free port> <args…>` (its output discarded but for
    /// warnings and errors on stderr) and waits until it accepts TCP connections.
    pub fn spawn(binary: &Path, args: &[&str]) -> io::Result<Self> {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port();
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let child = Command::new(binary)
            .arg("--listen")
            .arg(addr.to_string())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()?;
        let mut process = Self { child, addr };
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
        use std::io::{Read as _, Write as _};
        let start = wall_now();
        loop {
            let ready = TcpStream::connect(self.addr).and_then(|mut stream| {
                stream.set_read_timeout(Some(Duration::from_secs(2)))?;
                stream.write_all(b"GET /readyz HTTP/1.0\r\nHost: relay\r\n\r\n")?;
                let mut answer = String::new();
                stream.read_to_string(&mut answer)?;
                Ok(answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.0 200"))
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
    use super::parse_vm_rss;

    #[test]
    fn vm_rss_is_read_in_bytes() {
        let status = "Name:\trelay\nVmPeak:\t  9000 kB\nVmRSS:\t   11264 kB\nThreads:\t3\n";
        assert_eq!(parse_vm_rss(status), Some(11_264 * 1024));
        assert_eq!(parse_vm_rss("Name:\trelay\n"), None);
    }
}
