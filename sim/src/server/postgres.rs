//! [`Leadership`] over PostgreSQL (`relay --postgres`): many relay processes on one database,
//! one active.
//!
//! [`PgLeadership::campaign`] is [`relay_pg::campaign`]: wait for the schema's advisory lock,
//! take the next epoch. The won [`Term`]:
//!
//! * opens the relay from [`relay_pg::Leader::store`] (a fresh connection fenced by the epoch,
//!   also when rebuilding after a failed commit), wrapped in a [`TermStore`] so that a commit
//!   failing with `StoreError::Fenced` ends the term at once;
//! * ends when [`relay_pg::Leader::lost`] resolves (lock session gone, heartbeat failed, epoch
//!   moved);
//! * holds the [`relay_pg::Leader`]: dropping it when the term ends (or at shutdown) resigns,
//!   so a standby takes over at once.
//!
//! A newer schema or an invalid configuration is fatal (the process exits non-zero); anything
//! else (database down, connection lost while standing by) is retried with a backoff.

use std::sync::Arc;

use relay_core::{Config, Relay, blob::BlobStore, store::StoreError};
use relay_pg::{CampaignOptions, PgConfig, PgError};

use super::leadership::{CampaignError, CampaignFuture, Leadership, Term, TermEnd, TermStore};

/// Makes the blob store of each relay opened (media parts).
pub type BlobOpener = Arc<dyn Fn() -> Result<Box<dyn BlobStore>, StoreError> + Send + Sync>;

/// Campaigns for the leadership of one PostgreSQL schema and opens the relay on it.
pub struct PgLeadership {
    database: PgConfig,
    options: CampaignOptions,
    config: Config,
    seed: u64,
    blobs: BlobOpener,
}

impl std::fmt::Debug for PgLeadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `PgConfig`'s Debug hides the password.
        f.debug_struct("PgLeadership")
            .field("database", &self.database)
            .field("holder", &self.options.holder)
            .finish_non_exhaustive()
    }
}

impl PgLeadership {
    /// Relays of `config` (its JWT signing key must be the one every relay of the database
    /// shares) on `database`, media parts in the stores `blobs` makes, RNG seeded by `seed`.
    pub fn new(
        database: PgConfig,
        options: CampaignOptions,
        config: Config,
        seed: u64,
        blobs: BlobOpener,
    ) -> Self {
        Self {
            database,
            options,
            config,
            seed,
            blobs,
        }
    }
}

impl Leadership for PgLeadership {
    fn campaign(&mut self) -> CampaignFuture<'_> {
        Box::pin(async move {
            let leader = relay_pg::campaign(self.database.clone(), self.options.clone())
                .await
                .map_err(|e| match e {
                    PgError::Config(_) | PgError::SchemaVersion { .. } => {
                        CampaignError::Fatal(e.to_string())
                    }
                    other => CampaignError::Retry(other.to_string()),
                })?;
            let epoch = leader.epoch();
            let end = TermEnd::new();
            let mut watch = leader.watch();
            let watcher = end.clone();
            tokio::spawn(async move {
                let why = watch.lost().await;
                watcher.end(format!("leadership lost: {why}"));
            });
            let leader = Arc::new(leader);
            let opener_leader = Arc::clone(&leader);
            let opener_end = end.clone();
            let config = self.config.clone();
            let seed = self.seed;
            let blobs = Arc::clone(&self.blobs);
            let open = move || {
                let store = opener_leader.store().map_err(StoreError::from)?;
                let store = TermStore::new(store, opener_end.clone());
                Relay::with_blobs(config.clone(), Box::new(store), blobs()?, seed)
            };
            Ok(Term {
                open: Box::new(open),
                end,
                epoch: Some(epoch),
                holder: Box::new(leader),
            })
        })
    }
}
