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
//! A newer schema, an invalid configuration or keys that are not the ones the relays of the
//! database use ([`PgError::KeysDiffer`]: [`CampaignOptions::keys`] holds the fingerprints of
//! this relay's JWT and VAPID keys, see [`super::secrets`]) are fatal (the process exits
//! non-zero, with the fix in the message); anything else (database down, connection lost while
//! standing by) is retried with a backoff. A key rotation ([`relay_pg::KeyClaim::replacing`],
//! from `--rotate-jwt-key` / `--rotate-vapid-key`) replaces the recorded fingerprint in the
//! first term this process wins only: a later term of the same process checks like any other
//! relay, so it never undoes a rotation another relay made since.

use std::{collections::BTreeMap, sync::Arc};

use relay_core::{
    Config, Relay,
    blob::BlobStore,
    handoff::{ShardMap, ShardPlace},
    store::{Store, StoreError},
};
use relay_pg::{
    CampaignOptions, JoinOptions, KeyKind, KeyMismatch, Member, MemberStatus, PgConfig, PgError,
};

use super::cluster::{JoinFuture, Membership, Node, Owned, ShardLease};
use super::leadership::{CampaignError, CampaignFuture, Leadership, Term, TermEnd, TermStore};

/// Makes the blob store of each relay opened (media parts).
pub type BlobOpener = Arc<dyn Fn() -> Result<Box<dyn BlobStore>, StoreError> + Send + Sync>;

/// Campaigns for the leadership of one PostgreSQL schema and opens the relay on it.
pub struct PgLeadership {
    database: PgConfig,
    options: CampaignOptions,
    parts: RelayParts,
}

/// What a relay opened on a fenced PostgreSQL store is made of, besides the store.
#[derive(Clone)]
struct RelayParts {
    config: Config,
    seed: u64,
    blobs: BlobOpener,
    metrics: Option<super::metrics::Metrics>,
}

impl RelayParts {
    /// Relays of `config`, seeded by `seed`, media parts in the stores `blobs` makes; no
    /// metrics until `with_metrics`.
    fn new(config: Config, seed: u64, blobs: BlobOpener) -> Self {
        Self {
            config,
            seed,
            blobs,
            metrics: None,
        }
    }

    /// The relay of `config` (its shard `place` in a cluster) over `store`, metered when
    /// metrics are on, whose fenced commits end `end`.
    fn open(
        &self,
        store: relay_pg::PgStore,
        place: Option<ShardPlace>,
        end: TermEnd,
    ) -> Result<Relay, StoreError> {
        let store: Box<dyn Store> = match &self.metrics {
            Some(metrics) => Box::new(metrics.meter(store)),
            None => Box::new(store),
        };
        let config = match place {
            Some(shard) => Config {
                shard,
                ..self.config.clone()
            },
            None => self.config.clone(),
        };
        let store = TermStore::new(store, end);
        Relay::with_blobs(config, Box::new(store), (self.blobs)()?, self.seed)
    }
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
        let parts = RelayParts::new(config, seed, blobs);
        Self {
            database,
            options,
            parts,
        }
    }

    /// Times and counts every commit and load of the relays it opens (and their fenced
    /// commits) in `metrics`.
    #[must_use]
    pub fn with_metrics(mut self, metrics: super::metrics::Metrics) -> Self {
        self.parts.metrics = Some(metrics);
        self
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
                    PgError::KeysDiffer(mismatches) => {
                        CampaignError::Fatal(refusal_to_lead(&mismatches))
                    }
                    other => CampaignError::Retry(other.to_string()),
                })?;
            // A rotation is recorded now; later terms of this process only check.
            for claim in self.options.keys.values_mut() {
                claim.replace = false;
            }
            let epoch = leader.epoch();
            let end = TermEnd::new();
            let mut watch = leader.watch();
            let watcher = end.clone();
            tokio::spawn(async move {
                let why = watch.lost().await;
                watcher.end(format!("leadership lost: {why}"));
            });
            let leader = Arc::new(leader);
            let (opener_leader, opener_end) = (Arc::clone(&leader), end.clone());
            let parts = self.parts.clone();
            let open = move || {
                let store = opener_leader.store().map_err(StoreError::from)?;
                parts.open(store, None, opener_end.clone())
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

/// A node of the cluster of one PostgreSQL schema ([`relay_pg::join`]): its shards' relays
/// open on stores fenced by each shard's epoch, wrapped in a [`TermStore`] so that a fenced
/// commit ends that shard's term at once.
pub struct PgMembership {
    database: PgConfig,
    options: JoinOptions,
    parts: RelayParts,
}

impl std::fmt::Debug for PgMembership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgMembership")
            .field("database", &self.database)
            .field("node", &self.options.node)
            .field("shards", &self.options.shards)
            .finish_non_exhaustive()
    }
}

impl PgMembership {
    /// Node `options.node` of the cluster on `database`, serving relays of `config` (its
    /// shard is set per shard; its JWT key must be every node's), media parts in the stores
    /// `blobs` makes, RNG seeded by `seed`.
    pub fn new(
        database: PgConfig,
        options: JoinOptions,
        config: Config,
        seed: u64,
        blobs: BlobOpener,
    ) -> Self {
        let parts = RelayParts::new(config, seed, blobs);
        Self {
            database,
            options,
            parts,
        }
    }

    /// Times and counts every commit and load of the relays it opens in `metrics`.
    #[must_use]
    pub fn with_metrics(mut self, metrics: super::metrics::Metrics) -> Self {
        self.parts.metrics = Some(metrics);
        self
    }
}

/// Opens shard `place`'s relay under `epoch` from `member`'s fenced store.
fn open_shard(
    parts: &RelayParts,
    member: &Member,
    place: ShardPlace,
    epoch: u64,
    end: TermEnd,
) -> Result<Relay, StoreError> {
    let store = member.store(place.me().0).map_err(StoreError::from)?;
    if store.epoch() != epoch {
        // The shard moved on since the node decided to open it.
        return Err(StoreError::Fenced { epoch });
    }
    parts.open(store, Some(place), end)
}

impl Membership for PgMembership {
    fn join(&mut self) -> JoinFuture<'_> {
        Box::pin(async move {
            let member = relay_pg::join(self.database.clone(), self.options.clone())
                .await
                .map_err(|e| match e {
                    PgError::Config(_)
                    | PgError::SchemaVersion { .. }
                    | PgError::WrongMode(_)
                    | PgError::ShardsDiffer { .. } => CampaignError::Fatal(e.to_string()),
                    PgError::KeysDiffer(mismatches) => {
                        CampaignError::Fatal(refusal_to_lead(&mismatches))
                    }
                    other => CampaignError::Retry(other.to_string()),
                })?;
            // A rotation is recorded now; later joins of this process only check.
            for claim in self.options.keys.values_mut() {
                claim.replace = false;
            }
            let map = ShardMap::new(member.shards_total())
                .ok_or_else(|| CampaignError::Fatal("a cluster of no shards".into()))?;
            let name = member.node().name.clone();
            let (owned, directory) = (follow_owned(&member), follow_directory(&member));
            let member = Arc::new(member);
            let parts = self.parts.clone();
            let (for_open, for_hand_over) = (Arc::clone(&member), Arc::clone(&member));
            Ok(Node {
                name,
                map,
                owned,
                directory,
                address: self.options.address.clone(),
                open: Box::new(move |place, epoch, end| {
                    open_shard(&parts, &for_open, place, epoch, end)
                }),
                hand_over: Box::new(move |shard, epoch| {
                    let member = Arc::clone(&for_hand_over);
                    Box::pin(async move {
                        let to = member
                            .hand_over(shard, epoch)
                            .await
                            .map_err(|e| e.to_string())?;
                        tracing::info!(shard, epoch, to = ?to, "handed the shard over");
                        Ok(())
                    })
                }),
                holder: Box::new(member),
            })
        })
    }
}

/// What `member` owns, as the cluster's shell sees it, as it changes.
fn follow_owned(member: &Member) -> tokio::sync::watch::Receiver<Owned> {
    let (owned_tx, owned) = tokio::sync::watch::channel(owned_of(&member.watch().status()));
    let mut watch = member.watch();
    tokio::spawn(async move {
        loop {
            let status = watch.changed().await;
            let lost = matches!(status, MemberStatus::Lost(_));
            if owned_tx.send(owned_of(&status)).is_err() || lost {
                break;
            }
        }
    });
    owned
}

/// The address of the node serving each shard, as `member` learns it.
fn follow_directory(member: &Member) -> tokio::sync::watch::Receiver<BTreeMap<u16, String>> {
    let (directory_tx, directory) = tokio::sync::watch::channel(BTreeMap::new());
    let mut owners = member.watch().directory_watch();
    tokio::spawn(async move {
        loop {
            let addresses: BTreeMap<u16, String> = owners
                .borrow_and_update()
                .iter()
                .map(|(shard, owner)| (*shard, owner.address.clone()))
                .collect();
            if directory_tx.send(addresses).is_err() || owners.changed().await.is_err() {
                break;
            }
        }
    });
    directory
}

/// What a node owns, as the cluster's shell sees it.
fn owned_of(status: &MemberStatus) -> Owned {
    match status {
        MemberStatus::Owns(shards) => Owned::Shards(
            shards
                .iter()
                .map(|(shard, term)| {
                    let lease = ShardLease {
                        epoch: term.epoch,
                        leaving: term.handover_to.is_some(),
                    };
                    (*shard, lease)
                })
                .collect::<BTreeMap<_, _>>(),
        ),
        MemberStatus::Lost(why) => Owned::Lost(why.to_string()),
    }
}

/// The fatal message of a relay whose keys are not the database's: each key, both short
/// fingerprints, and how to fix it.
fn refusal_to_lead(mismatches: &[KeyMismatch]) -> String {
    let mut text = String::from(
        "refusing to lead: this relay's keys are not the ones the relays of this database use",
    );
    for m in mismatches {
        text.push_str(&format!("\n  * {m}.\n    Fix: {}", fix(m.kind)));
    }
    text
}

fn fix(kind: KeyKind) -> &'static str {
    match kind {
        KeyKind::Jwt => {
            "start every relay of this database with the same JWT signing key (the same \
             --secrets-dir DIR/jwt-signing.key file; with another key, every user would be \
             logged out at this failover). To rotate the key on purpose, start one relay with \
             --rotate-jwt-key (it records the new key when it leads), then copy its \
             DIR/jwt-signing.key to the others."
        }
        KeyKind::Vapid => {
            "start every relay of this database with the same VAPID key (DIR/vapid.pem of the \
             same --secrets-dir, or the same --vapid-key FILE; with another key, every browser's \
             push subscription would silently stop working). To rotate the key on purpose, start \
             one relay with --rotate-vapid-key (it records the new key when it leads; browsers \
             get pushes again once they subscribe to the new key), then copy the new key to the \
             others. A relay without --vapid-subject is not checked."
        }
        KeyKind::Cluster => {
            "start every node of this cluster with the same cluster key (the same \
             --secrets-dir DIR/cluster.key file; with another key, the nodes could neither \
             link nor pass requests on to each other). Copy one node's DIR/cluster.key to the \
             others."
        }
    }
}

#[cfg(test)]
mod tests {
    use relay_pg::KeyFingerprint;

    use super::*;

    #[test]
    fn the_refusal_names_each_key_both_fingerprints_and_the_fix() {
        let mismatch = |kind, ours: u8, recorded: u8| KeyMismatch {
            kind,
            ours: KeyFingerprint::from_bytes([ours; 32]),
            recorded: KeyFingerprint::from_bytes([recorded; 32]),
            recorded_by: "relay pid 9 listen 10.0.0.1:8080".into(),
            recorded_epoch: 4,
            recorded_at: "2030-01-01 00:00:00+00".into(),
        };
        let text = refusal_to_lead(&[
            mismatch(KeyKind::Jwt, 0x11, 0x22),
            mismatch(KeyKind::Vapid, 0x33, 0x44),
        ]);
        for part in [
            "the jwt key here has fingerprint 111111111111",
            "222222222222",
            "--secrets-dir",
            "--rotate-jwt-key",
            "the vapid key here has fingerprint 333333333333",
            "444444444444",
            "--vapid-key",
            "--rotate-vapid-key",
            "relay pid 9",
        ] {
            assert!(text.contains(part), "{part}:\n{text}");
        }
        assert!(!text.contains(&"11".repeat(7)), "{text}");
    }
}
