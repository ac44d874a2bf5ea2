//! The failover topology (fault kind `failover`): active/standby relays on one shared store,
//! the fencing of a paused leader tested without PostgreSQL.
//!
//! ```text
//!   clients ──► relay (load balancer: each new connection to the lease holder)
//!                 │                         │
//!                 ▼                         ▼
//!              relay-a                   relay-b        RelayServer::campaigning(SimLeadership)
//!                 └──── SimStore: rows + lease + epoch ───┘   (the shared "database")
//! ```
//!
//! Both relay hosts run the server shell's active/standby mode (`relay_server::leadership`),
//! the one `relay --postgres` runs, over [`SimLeadership`]: a lease of [`LEASE_MS`] in the
//! shared store, renewed every [`RENEW_MS`], taken by a standby that polls every
//! [`CAMPAIGN_POLL_MS`] once it lapsed; each win increments the **epoch**, and the won term's
//! store ([`SimStore::open_fenced`]) refuses every commit and load of an older epoch with
//! `StoreError::Fenced`, which ends the term at once (fail-stop: no ack, every socket closed).
//!
//! The faults: a **freeze** (SIGSTOP/SIGCONT) of the active relay holds every link of its host
//! and leaves its lease calls unanswered, so it learns nothing while the standby takes over;
//! when it resumes, the frames that were in flight reach it before it hears of the new epoch,
//! and only the fence stands between them and a second writer. A **power-off** of the active
//! relay (every `Crash` of the relay in this topology) lets its lease lapse; it never
//! resigns. The planted bug `unfenced-store` switches the fence off, and the client-visible
//! oracles (seq uniqueness, exactly-once, liveness) must catch the split brain.
//!
//! Differences from PostgreSQL, on purpose: the lease replaces the advisory lock's session
//! (PostgreSQL frees the lock when the session dies; `idle_session_timeout` bounds a paused
//! session like the lease here), and the load balancer's health check is instant (it reads
//! the lease holder instead of polling `/readyz`).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use relay_core::Relay;
use relay_core::store::StoreError;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::bounds::{LEASE_MS, RENEW_MS};
use crate::store::{FaultyStore, Renewal, SimStore, StoreCtl};
use crate::time::sleep_ms;
use relay_server::leadership::{CampaignFuture, Leadership, Term, TermEnd, TermStore};

/// How often a standby tries to take the lease.
pub const CAMPAIGN_POLL_MS: u64 = 250;
/// Buffer of each direction of a balanced connection.
const PUMP_BYTES: usize = 4_096;

/// How long the balancer keeps a client's connection after the relay ended its side, for the
/// client to read what came before the end and close.
const LINGER_MS: u64 = 10_000;

/// Builds the relay of a term from its fenced store.
pub type MakeRelay = Arc<dyn Fn(TermStore<FaultyStore>) -> Result<Relay, StoreError> + Send + Sync>;

/// The leadership of one relay host over the shared store's lease.
pub struct SimLeadership {
    host: String,
    store: SimStore,
    make: MakeRelay,
}

impl std::fmt::Debug for SimLeadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimLeadership")
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

impl SimLeadership {
    /// The leadership of `host` over `store`; `make` builds each term's relay.
    pub fn new(host: &str, store: SimStore, make: MakeRelay) -> Self {
        Self {
            host: host.to_owned(),
            store,
            make,
        }
    }
}

/// Resigns the lease when dropped (the term ended, or the server stopped); a powered-off
/// host's drop does nothing (see [`StoreCtl::resign`]).
struct Resign {
    ctl: StoreCtl,
    host: String,
    epoch: u64,
}

impl Drop for Resign {
    fn drop(&mut self) {
        self.ctl.resign(&self.host, self.epoch);
    }
}

impl Leadership for SimLeadership {
    fn campaign(&mut self) -> CampaignFuture<'_> {
        Box::pin(async move {
            let ctl = self.store.ctl().clone();
            let epoch = loop {
                if let Some(epoch) = ctl.try_lead(&self.host, LEASE_MS) {
                    break epoch;
                }
                sleep_ms(CAMPAIGN_POLL_MS).await;
            };
            tracing::info!(host = %self.host, epoch, "leads");
            let end = TermEnd::new();
            {
                let (ctl, host, end) = (ctl.clone(), self.host.clone(), end.clone());
                tokio::spawn(async move {
                    loop {
                        tokio::select! {
                            biased;
                            _ = end.wait() => break,
                            () = sleep_ms(RENEW_MS) => {}
                        }
                        match ctl.renew(&host, epoch, LEASE_MS) {
                            Renewal::Renewed | Renewal::Unanswered => {}
                            Renewal::Lost(why) => {
                                end.end(format!("lease lost: {why}"));
                                break;
                            }
                        }
                    }
                });
            }
            let (store, host, make, fence_end) = (
                self.store.clone(),
                self.host.clone(),
                Arc::clone(&self.make),
                end.clone(),
            );
            let open = move || {
                let fenced = store.open_fenced(&host, epoch)?;
                make(TermStore::new(fenced, fence_end.clone()))
            };
            Ok(Term {
                open: Box::new(open),
                end,
                epoch: Some(epoch),
                holder: Box::new(Resign {
                    ctl,
                    host: self.host.clone(),
                    epoch,
                }),
            })
        })
    }
}

/// Further relays the balancer tries when connecting to the first fails, as
/// `deploy/cluster/haproxy.cfg` does (`retries 2`, `option redispatch`).
pub const REDISPATCH_RETRIES: usize = 2;

/// The load balancer on the `relay` host: each accepted connection goes to the first relay
/// `pick` names that accepts it (the lease holder; in the cluster topology, the live nodes in
/// turn), trying at most [`REDISPATCH_RETRIES`] more, and is refused, i.e. closed at once,
/// while it names none or none accepts. An end is passed on as an end, after
/// every byte before it (a half-close, as TCP proxies do): a relay that closes a socket
/// cleanly — its Close frame, then its FIN — is seen so by the client, whose later bytes the
/// balancer reads and drops for 10 s (`LINGER_MS`) rather than reset it with them unread. A failure
/// (a reset, a failed write) on either side tears the whole connection down: a relay that
/// resets a client it stopped reading for is seen by that client as a reset, as without a
/// balancer.
pub async fn balancer(mut pick: impl FnMut() -> Vec<String>, port: u16) -> std::io::Result<()> {
    let listener =
        turmoil::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port))).await?;
    loop {
        let (client, _) = listener.accept().await?;
        let targets = pick();
        if targets.is_empty() {
            drop(client);
            continue;
        }
        tokio::spawn(async move {
            let mut upstream = None;
            for target in targets.iter().take(1 + REDISPATCH_RETRIES) {
                if let Ok(u) = turmoil::net::TcpStream::connect((target.as_str(), port)).await {
                    upstream = Some(u);
                    break;
                }
            }
            let Some(upstream) = upstream else {
                return;
            };
            let (mut cr, mut cw) = client.into_split();
            let (mut ur, mut uw) = upstream.into_split();
            let relay_ended = AtomicBool::new(false);
            let failed = tokio::sync::Notify::new();
            // Client -> relay; once the relay has ended, the client's bytes are dropped.
            let up = async {
                let mut buf = vec![0u8; PUMP_BYTES];
                loop {
                    match cr.read(&mut buf).await {
                        Ok(0) => {
                            if !relay_ended.load(Ordering::Relaxed) {
                                let _ = uw.shutdown().await;
                            }
                            return;
                        }
                        Ok(n) => {
                            if !relay_ended.load(Ordering::Relaxed)
                                && uw.write_all(&buf[..n]).await.is_err()
                            {
                                return failed.notify_one();
                            }
                        }
                        Err(_) => return failed.notify_one(),
                    }
                }
            };
            // Relay -> client; the relay's end becomes the client's, then the connection
            // lingers for the client to read it.
            let down = async {
                let mut buf = vec![0u8; PUMP_BYTES];
                loop {
                    match ur.read(&mut buf).await {
                        Ok(0) => {
                            relay_ended.store(true, Ordering::Relaxed);
                            let _ = cw.shutdown().await;
                            sleep_ms(LINGER_MS).await;
                            return failed.notify_one();
                        }
                        Ok(n) => {
                            if cw.write_all(&buf[..n]).await.is_err() {
                                return failed.notify_one();
                            }
                        }
                        Err(_) => return failed.notify_one(),
                    }
                }
            };
            tokio::select! {
                biased;
                () = failed.notified() => {}
                _ = async { tokio::join!(up, down) } => {}
            }
        });
    }
}
