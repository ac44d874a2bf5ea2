//! Active/standby: a [`RelayServer`](super::RelayServer) that serves only while it leads.
//!
//! A server built with [`RelayServer::campaigning`](super::RelayServer::campaigning) binds its
//! listener at once and then loops:
//!
//! ```text
//!   standby ──campaign() won──► open the relay (Term::open) ──► active ──term ended──► standby …
//!   /healthz 200, /readyz 503 NOT_LEADER,                  /readyz 200, serves      fail-stop:
//!   everything else 503 NOT_LEADER + Retry-After                                    every socket
//!                                                                                   closed at once
//! ```
//!
//! * **A term ends** when the [`Leadership`] says so through its [`TermEnd`] (e.g. PostgreSQL
//!   reports the lock session gone) or when a commit fails with [`StoreError::Fenced`] (a store
//!   wrapped in [`TermStore`] ends the term itself). The core task then stops at once: it marks
//!   the server standby (new requests get `NOT_LEADER`), answers every input still queued with
//!   `NOT_LEADER`, closes every socket (1012 "not the leader"), drops the relay and the term
//!   (which resigns), and the server campaigns again. Frames already queued for a socket were
//!   released by commits of the ended term, which the database kept: they are true.
//! * **Nothing is acknowledged after the end is known**: an acknowledgement leaves only after
//!   its commit, and every commit of an ended term fails (fenced), so the answers of the batch
//!   in flight are 503s and no ack.
//! * A failed campaign is retried with a backoff ([`CAMPAIGN_RETRY_MS`] doubling up to
//!   [`CAMPAIGN_RETRY_MAX_MS`]), except a [`CampaignError::Fatal`] one, which stops the server
//!   (the `relay` binary exits non-zero).
//!
//! The mechanism knows nothing of PostgreSQL: the `relay` binary's `--postgres` mode implements
//! [`Leadership`] over `relay_pg` (`super::postgres`), and a test can implement it with
//! channels.

use std::{fmt, future::Future, pin::Pin, sync::Arc};

use relay_core::store::{Batch, Snapshot, Store, StoreError};
use tokio::sync::watch;

use super::RelayOpener;

/// First delay before campaigning again after a failed campaign.
pub const CAMPAIGN_RETRY_MS: u64 = 500;
/// Longest delay between failed campaigns.
pub const CAMPAIGN_RETRY_MAX_MS: u64 = 8_000;
/// `Retry-After` (seconds) of a `NOT_LEADER` refusal: a standby that is about to take over
/// does so within about this long after the leader died.
pub const NOT_LEADER_RETRY_AFTER_S: u64 = 1;
/// The stable error code of every refusal by a standby (HTTP 503 and `/readyz`).
pub const NOT_LEADER: &str = "NOT_LEADER";
/// WebSocket close code sent to every socket when a term ends (RFC 6455 §7.4.1 registry:
/// 1012 "service restart"; clients reconnect with their normal backoff).
pub const CLOSE_NOT_LEADER: u16 = 1012;

/// The boxed future of [`Leadership::campaign`].
pub type CampaignFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Term, CampaignError>> + Send + 'a>>;

/// A way to become the one active relay among several (a database lock, a test's channel).
pub trait Leadership: Send + 'static {
    /// Waits until this process leads and returns the term (a standby waits here). Dropping
    /// the future abandons the campaign.
    fn campaign(&mut self) -> CampaignFuture<'_>;
}

/// Why a campaign failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CampaignError {
    /// Try again later (the database is unreachable, a connection dropped).
    Retry(String),
    /// Never going to work (e.g. the database's schema is newer than this build, or this
    /// relay's keys differ from the ones the database recorded): the server stops.
    Fatal(String),
}

impl fmt::Display for CampaignError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Retry(why) => write!(f, "{why} (retrying)"),
            Self::Fatal(why) => f.write_str(why),
        }
    }
}

/// One won leadership.
pub struct Term {
    /// Opens the relay from the shared store, fenced by this term: at the start, and again to
    /// rebuild after a failed commit that did not end the term.
    pub open: RelayOpener,
    /// Ends with the term; the server watches it.
    pub end: TermEnd,
    /// The fencing token, if the leadership has one (shown by `/readyz` and in logs).
    pub epoch: Option<u64>,
    /// Held for as long as the term lasts, then dropped (e.g. a `relay_pg::Leader`, which
    /// resigns when dropped).
    pub holder: Box<dyn Send>,
}

impl fmt::Debug for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Term")
            .field("epoch", &self.epoch)
            .field("end", &self.end)
            .finish_non_exhaustive()
    }
}

/// The end of a [`Term`]: set once (the first reason wins), seen by every clone.
#[derive(Clone)]
pub struct TermEnd(Arc<watch::Sender<Option<String>>>);

impl Default for TermEnd {
    fn default() -> Self {
        Self(Arc::new(watch::channel(None).0))
    }
}

impl fmt::Debug for TermEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TermEnd").field(&*self.0.borrow()).finish()
    }
}

impl TermEnd {
    /// A term still running.
    pub fn new() -> Self {
        Self::default()
    }

    /// Ends the term (no-op if it already ended: the first reason is kept).
    pub fn end(&self, why: impl Into<String>) {
        let why = why.into();
        self.0.send_if_modified(|state| {
            if state.is_some() {
                return false;
            }
            *state = Some(why);
            true
        });
    }

    /// Why it ended, if it did.
    pub fn ended(&self) -> Option<String> {
        self.0.borrow().clone()
    }

    /// Resolves once the term has ended (at once if it already has).
    pub async fn wait(&self) -> String {
        let mut rx = self.0.subscribe();
        let ended = rx.wait_for(Option::is_some).await;
        match ended {
            Ok(state) => state.clone().unwrap_or_default(),
            // Unreachable while `self` holds the sender.
            Err(_) => "the term's signal was dropped".into(),
        }
    }
}

/// A store that ends its [`Term`] the moment a commit or load fails with
/// [`StoreError::Fenced`] (another relay took over): the server goes fail-stop without waiting
/// for the leadership's own notice.
#[derive(Debug)]
pub struct TermStore<S> {
    inner: S,
    end: TermEnd,
}

impl<S: Store> TermStore<S> {
    /// Wraps `inner`, ending `end` on a fenced error.
    pub fn new(inner: S, end: TermEnd) -> Self {
        Self { inner, end }
    }

    fn watch<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(StoreError::Fenced { epoch }) = &result {
            self.end.end(format!(
                "a commit was fenced: epoch {epoch} is over (another relay took over)"
            ));
        }
        result
    }
}

impl<S: Store> Store for TermStore<S> {
    fn load(&mut self) -> Result<Snapshot, StoreError> {
        let result = self.inner.load();
        self.watch(result)
    }

    fn load_eager(&mut self) -> Result<Snapshot, StoreError> {
        let result = self.inner.load_eager();
        self.watch(result)
    }

    fn commit(&mut self, batch: &Batch) -> Result<(), StoreError> {
        let result = self.inner.commit(batch);
        self.watch(result)
    }

    fn reader(&mut self) -> Result<Box<dyn relay_core::store::StoreRead>, StoreError> {
        self.inner.reader()
    }
}

#[cfg(test)]
mod tests {
    use relay_core::store::{MemoryStore, Table};

    use super::*;

    /// A store whose every commit is fenced.
    #[derive(Debug)]
    struct Fenced;

    impl Store for Fenced {
        fn load(&mut self) -> Result<Snapshot, StoreError> {
            Ok(Snapshot::new())
        }
        fn commit(&mut self, _: &Batch) -> Result<(), StoreError> {
            Err(StoreError::Fenced { epoch: 3 })
        }
        fn reader(&mut self) -> Result<Box<dyn relay_core::store::StoreRead>, StoreError> {
            MemoryStore::new().reader()
        }
    }

    fn put() -> Batch {
        let mut batch = Batch::new();
        batch.put(Table::Meta, "k", b"v");
        batch
    }

    #[test]
    fn a_fenced_commit_ends_the_term_and_other_results_do_not() {
        let end = TermEnd::new();
        let mut ok = TermStore::new(MemoryStore::new(), end.clone());
        ok.commit(&put()).unwrap();
        ok.load().unwrap();
        assert_eq!(end.ended(), None);
        let mut fenced = TermStore::new(Fenced, end.clone());
        assert!(matches!(
            fenced.commit(&put()),
            Err(StoreError::Fenced { epoch: 3 })
        ));
        let why = end.ended().unwrap();
        assert!(why.contains("epoch 3"), "{why}");
        end.end("later");
        assert_eq!(end.ended().unwrap(), why, "the first reason is kept");
    }

    #[tokio::test]
    async fn waiting_resolves_when_the_term_ends() {
        let end = TermEnd::new();
        let waiter = tokio::spawn({
            let end = end.clone();
            async move { end.wait().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        end.end("lost");
        assert_eq!(waiter.await.unwrap(), "lost");
        assert_eq!(end.wait().await, "lost");
    }
}
