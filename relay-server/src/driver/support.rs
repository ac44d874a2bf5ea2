//! The core task's helpers: the close code of each close reason, the next gone push report,
//! the refusal of an input after its term ended, the committer for a commit mode, and the store stand-in of a core whose store
//! went to its committer.

use super::*;

/// The refusal of an input that reached a core whose term ended.
pub(super) fn not_leader_response() -> HttpResponse {
    let mut response = HttpResponse::error(
        503,
        &wire::ErrorCode::other(crate::leadership::NOT_LEADER),
        "this relay just stopped being the active relay; retry shortly",
    );
    response.retry_after_s = Some(crate::leadership::NOT_LEADER_RETRY_AFTER_S);
    response
}

/// Takes the store out of `relay`, starts its readers (the relay reads ahead unless they run
/// on the core) and then its committer. A relay without a store (taken before: a bug) gets a
/// committer that fails every commit, so the relay fails stop.
pub(super) fn pipeline_for(
    commit: &CommitMode,
    read: &ReadMode,
    relay: &mut Relay,
) -> (Committer, Readers) {
    let mut store = relay.take_store().unwrap_or_else(|| {
        error!("the relay's store was already taken: every commit fails");
        Box::new(NoStore)
    });
    let readers = Readers::start(read, &mut *store, relay);
    let shard = relay.config().shard.me();
    (Committer::start(commit, store, shard), readers)
}

/// The store of a relay whose store was taken elsewhere: refuses everything.
#[derive(Debug)]
pub(super) struct NoStore;

impl relay_core::store::Store for NoStore {
    fn load(&mut self) -> Result<relay_core::store::Snapshot, relay_core::store::StoreError> {
        Err(relay_core::store::StoreError::Backend("no store".into()))
    }
    fn commit(
        &mut self,
        _: &relay_core::store::Batch,
    ) -> Result<(), relay_core::store::StoreError> {
        Err(relay_core::store::StoreError::Backend("no store".into()))
    }
    fn reader(
        &mut self,
    ) -> Result<Box<dyn relay_core::store::StoreRead>, relay_core::store::StoreError> {
        Err(relay_core::store::StoreError::Backend("no store".into()))
    }
}

/// WebSocket close codes (RFC 6455 §7.4.1).
pub(super) mod close_code {
    pub(crate) const NORMAL: u16 = 1000;
    pub(crate) const GOING_AWAY: u16 = 1001;
    pub(crate) const INTERNAL_ERROR: u16 = 1011;
    pub(crate) const POLICY_VIOLATION: u16 = 1008;
    pub(crate) const TRY_AGAIN_LATER: u16 = 1013;
}

/// The close code and reason of `reason`.
pub(super) fn close_for(reason: CloseReason) -> (u16, &'static str) {
    match reason {
        CloseReason::Goaway => (close_code::NORMAL, "goaway"),
        CloseReason::Idle => (close_code::GOING_AWAY, "idle timeout"),
        CloseReason::StorageFailure => (close_code::INTERNAL_ERROR, "relay restarting"),
        CloseReason::RateLimited => (close_code::POLICY_VIOLATION, "frame rate limit exceeded"),
        CloseReason::StorageUnavailable => (close_code::TRY_AGAIN_LATER, "storage unavailable"),
    }
}

/// The next gone report; pends forever once the channel is closed (or without a worker).
pub(super) async fn next_gone(gone: &mut Option<mpsc::Receiver<GoneTarget>>) -> GoneTarget {
    loop {
        match gone {
            Some(rx) => match rx.recv().await {
                Some(report) => return report,
                None => *gone = None,
            },
            None => std::future::pending::<()>().await,
        }
    }
}
