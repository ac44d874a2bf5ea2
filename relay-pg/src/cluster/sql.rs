//! The cluster's statements: joining (one transaction), the heartbeat (renew, read, plan), a
//! handover and leaving. Every change of a shard's row is a compare-and-set on the epoch the
//! writer saw (every change of owner takes the next epoch), so a change made from a stale view
//! does nothing.

use std::time::Duration;

use futures_util::future::join_all;
use tokio_postgres::{Client, Statement, Transaction};

use super::{
    JoinOptions, ShardOwner, ShardTerm,
    plan::{NodeId, ShardRow, Step},
};
use crate::{PgError, error::describe, keys, schema};

/// Advisory-lock class of the join transaction (`'RLYC'`): the lock key is `class << 32 |
/// schema oid`, so joins (and the migrations they run) take turns.
pub const CLUSTER_LOCK_CLASS: i64 = 0x524C_5943;

pub(super) fn backend(e: &tokio_postgres::Error) -> PgError {
    PgError::Backend(describe(e))
}

/// What a successful join got.
#[derive(Debug)]
pub(super) struct Joined {
    pub(super) incarnation: u64,
    pub(super) events: Vec<keys::KeyEvent>,
}

/// Why a join did not get its node row.
pub(super) enum JoinRefused {
    /// The name is held by a live incarnation (this one's predecessor, or another process
    /// configured with the same name); try again once its lease lapsed.
    NameInUse {
        incarnation: u64,
        address: String,
    },
    Failed(PgError),
}

impl From<PgError> for JoinRefused {
    fn from(e: PgError) -> Self {
        Self::Failed(e)
    }
}

/// The join transaction: migrate, create or check the cluster, check the keys, take the next
/// incarnation of the node's name. Nothing is written unless all of it succeeds.
pub(super) async fn join(
    client: &mut Client,
    schema_name: &str,
    options: &JoinOptions,
) -> Result<Joined, JoinRefused> {
    let tx = client.transaction().await.map_err(|e| backend(&e))?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(($1::bigint << 32) | \
         (SELECT oid::bigint FROM pg_namespace WHERE nspname = $2))",
        &[&CLUSTER_LOCK_CLASS, &schema_name],
    )
    .await
    .map_err(|e| backend(&e))?;
    let found = schema::version_in(&tx, schema_name).await?;
    if (schema::LEADER_VERSION..schema::CLUSTER_VERSION).contains(&found) {
        // Before the cluster's tables: any leader epoch means an active/standby deployment.
        let epoch = leader_epoch(&tx).await?;
        if epoch > 0 {
            return Err(served_by_a_leader(schema_name, epoch).into());
        }
    }
    schema::migrate_pending(&tx, schema_name, found).await?;
    cluster_row(&tx, schema_name, options.shards).await?;
    let incarnation = node_row(&tx, options).await?;
    let holder = format!("cluster node {}", options.node);
    let events = keys::check_and_record(
        &tx,
        schema_name,
        &options.keys,
        &holder,
        i64::try_from(incarnation).unwrap_or(i64::MAX),
    )
    .await?;
    tx.commit().await.map_err(|e| backend(&e))?;
    Ok(Joined {
        incarnation,
        events,
    })
}

async fn leader_epoch(tx: &Transaction<'_>) -> Result<i64, PgError> {
    Ok(tx
        .query_one("SELECT epoch FROM leader WHERE id = 1", &[])
        .await
        .map_err(|e| backend(&e))?
        .get(0))
}

fn served_by_a_leader(schema_name: &str, epoch: i64) -> PgError {
    PgError::WrongMode(format!(
        "schema {schema_name} is served by an active/standby relay (leader epoch {epoch}); a \
         cluster needs a schema of its own (moving an existing deployment into a cluster is not \
         supported)"
    ))
}

/// Creates the cluster (its row, its shards, and the leader epoch taken from 0 to 1 so that no
/// active/standby relay ever serves this schema), or checks that it has `shards` shards.
async fn cluster_row(tx: &Transaction<'_>, schema_name: &str, shards: u16) -> Result<(), PgError> {
    let ours = i32::from(shards);
    let recorded: Option<i32> = tx
        .query_opt("SELECT shards FROM cluster WHERE id = 1", &[])
        .await
        .map_err(|e| backend(&e))?
        .map(|r| r.get(0));
    match recorded {
        Some(recorded) if recorded == ours => Ok(()),
        Some(recorded) => Err(PgError::ShardsDiffer {
            recorded: u32::try_from(recorded).unwrap_or(0),
            ours: u32::from(shards),
        }),
        None => {
            // The leader row's lock orders this with a campaign's bump: whichever commits
            // second sees the other (a campaign checks for the cluster row after its bump).
            let taken = tx
                .execute(
                    "UPDATE leader SET epoch = 1, holder = 'cluster', since = now() \
                     WHERE id = 1 AND epoch = 0",
                    &[],
                )
                .await
                .map_err(|e| backend(&e))?;
            if taken == 0 {
                return Err(served_by_a_leader(schema_name, leader_epoch(tx).await?));
            }
            tx.execute("INSERT INTO cluster (id, shards) VALUES (1, $1)", &[&ours])
                .await
                .map_err(|e| backend(&e))?;
            tx.execute(
                "INSERT INTO shards (id) SELECT generate_series(0, $1 - 1)",
                &[&ours],
            )
            .await
            .map_err(|e| backend(&e))?;
            tracing::info!(schema = schema_name, shards, "created the cluster");
            Ok(())
        }
    }
}

/// Takes the next incarnation of the node's name, unless a live one holds it.
async fn node_row(tx: &Transaction<'_>, options: &JoinOptions) -> Result<u64, JoinRefused> {
    let row = tx
        .query_opt(
            "SELECT incarnation, lease_until > clock_timestamp(), address FROM nodes \
             WHERE name = $1 FOR UPDATE",
            &[&options.node],
        )
        .await
        .map_err(|e| backend(&e))?;
    let previous = match row {
        Some(row) if row.get::<_, bool>(1) => {
            return Err(JoinRefused::NameInUse {
                incarnation: u64::try_from(row.get::<_, i64>(0)).unwrap_or(0),
                address: row.get(2),
            });
        }
        Some(row) => row.get::<_, i64>(0),
        None => 0,
    };
    let incarnation = previous + 1;
    let lease = ms(options.lease_ms);
    tx.execute(
        "INSERT INTO nodes (name, incarnation, address, lease_until, joined) \
         VALUES ($1, $2, $3, clock_timestamp() + $4::bigint * interval '1 millisecond', now()) \
         ON CONFLICT (name) DO UPDATE SET incarnation = EXCLUDED.incarnation, \
         address = EXCLUDED.address, lease_until = EXCLUDED.lease_until, joined = EXCLUDED.joined",
        &[&options.node, &incarnation, &options.address, &lease],
    )
    .await
    .map_err(|e| backend(&e))?;
    Ok(u64::try_from(incarnation).unwrap_or(0))
}

fn ms(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The heartbeat's prepared statements.
pub(super) struct Statements {
    renew: Statement,
    owned: Statement,
    directory: Statement,
    live: Statement,
    rows: Statement,
    assign: Statement,
    mark: Statement,
    unmark: Statement,
    hand_over: Statement,
    release: Statement,
    lapse: Statement,
}

impl Statements {
    pub(super) async fn prepare(client: &Client) -> Result<Self, PgError> {
        let texts = [
            // Renews only a lease that has not lapsed: a lapsed incarnation lost its shards.
            "UPDATE nodes SET lease_until = clock_timestamp() + $3::bigint * interval '1 millisecond' \
             WHERE name = $1 AND incarnation = $2 AND lease_until > clock_timestamp()",
            "SELECT id, epoch, handover_to FROM shards \
             WHERE owner = $1 AND owner_incarnation = $2 ORDER BY id",
            // Who serves each shard: its owner, if that incarnation's lease runs.
            "SELECT s.id, n.name, n.address FROM shards s JOIN nodes n \
             ON n.name = s.owner AND n.incarnation = s.owner_incarnation \
             WHERE n.lease_until > clock_timestamp() ORDER BY s.id",
            "SELECT name, incarnation FROM nodes WHERE lease_until > clock_timestamp() ORDER BY name",
            "SELECT id, epoch, owner, owner_incarnation, handover_to, \
             handover_due <= clock_timestamp() FROM shards ORDER BY id",
            // Assign: to a live incarnation only, and only from the epoch the plan saw.
            "UPDATE shards s SET epoch = s.epoch + 1, owner = n.name, \
             owner_incarnation = n.incarnation, handover_to = NULL, handover_due = NULL, \
             moves = s.moves + 1, since = now() FROM nodes n \
             WHERE s.id = $1 AND s.epoch = $2 AND n.name = $3 AND n.incarnation = $4 \
             AND n.lease_until > clock_timestamp()",
            "UPDATE shards SET handover_to = $3, \
             handover_due = clock_timestamp() + $4::bigint * interval '1 millisecond' \
             WHERE id = $1 AND epoch = $2",
            "UPDATE shards SET handover_to = NULL, handover_due = NULL WHERE id = $1 AND epoch = $2",
            // The owner hands the shard to the node it is marked for, if that one is live.
            "UPDATE shards s SET epoch = s.epoch + 1, owner = n.name, \
             owner_incarnation = n.incarnation, handover_to = NULL, handover_due = NULL, \
             moves = s.moves + 1, since = now() FROM nodes n \
             WHERE s.id = $1 AND s.epoch = $2 AND s.owner = $3 AND s.owner_incarnation = $4 \
             AND n.name = s.handover_to AND n.lease_until > clock_timestamp() RETURNING n.name",
            // Otherwise it lets it go: the coordinator assigns it at its next round.
            "UPDATE shards SET epoch = epoch + 1, owner = NULL, owner_incarnation = NULL, \
             handover_to = NULL, handover_due = NULL, since = now() \
             WHERE id = $1 AND epoch = $2 AND owner = $3 AND owner_incarnation = $4",
            "UPDATE nodes SET lease_until = clock_timestamp() WHERE name = $1 AND incarnation = $2",
        ];
        let prepared = join_all(texts.iter().map(|t| client.prepare(t))).await;
        let mut it = prepared.into_iter();
        let mut next = || -> Result<Statement, PgError> {
            it.next()
                .ok_or_else(|| PgError::Backend("a statement went missing".into()))?
                .map_err(|e| backend(&e))
        };
        Ok(Self {
            renew: next()?,
            owned: next()?,
            directory: next()?,
            live: next()?,
            rows: next()?,
            assign: next()?,
            mark: next()?,
            unmark: next()?,
            hand_over: next()?,
            release: next()?,
            lapse: next()?,
        })
    }
}

/// A renewal's outcome.
pub(super) enum Renewed {
    /// The lease runs on; the shards this incarnation owns, and who serves every shard.
    Owns {
        shards: std::collections::BTreeMap<u16, ShardTerm>,
        directory: std::collections::BTreeMap<u16, ShardOwner>,
    },
    /// The lease had lapsed: this incarnation owns nothing any more.
    Lapsed,
}

/// Renews the lease and reads what the node owns and who owns the rest (pipelined: one round
/// trip).
pub(super) async fn renew(
    client: &Client,
    s: &Statements,
    me: &NodeId,
    lease_ms: u64,
) -> Result<Renewed, PgError> {
    let inc = ms(me.incarnation);
    let lease = ms(lease_ms);
    let renew_params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&me.name, &inc, &lease];
    let owned_params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&me.name, &inc];
    // Sent together, answered in order: one round trip.
    let (renewed, owned, directory) = tokio::join!(
        client.execute(&s.renew, &renew_params),
        client.query(&s.owned, &owned_params),
        client.query(&s.directory, &[]),
    );
    if renewed.map_err(|e| backend(&e))? == 0 {
        return Ok(Renewed::Lapsed);
    }
    let mut shards = std::collections::BTreeMap::new();
    for row in owned.map_err(|e| backend(&e))? {
        let (id, epoch) = (row.get::<_, i32>(0), row.get::<_, i64>(1));
        let (Ok(id), Ok(epoch)) = (u16::try_from(id), u64::try_from(epoch)) else {
            return Err(PgError::Backend(format!(
                "bad shard row {id} epoch {epoch}"
            )));
        };
        shards.insert(
            id,
            ShardTerm {
                epoch,
                handover_to: row.get(2),
            },
        );
    }
    let directory = directory
        .map_err(|e| backend(&e))?
        .iter()
        .filter_map(|row| {
            let id = u16::try_from(row.get::<_, i32>(0)).ok()?;
            let owner = ShardOwner {
                node: row.get(1),
                address: row.get(2),
            };
            Some((id, owner))
        })
        .collect();
    Ok(Renewed::Owns { shards, directory })
}

/// The coordinator's round (the live node first by name): read, plan, apply. Returns how many
/// rows changed. A node that is not the coordinator reads only the live nodes.
pub(super) async fn coordinate(
    client: &Client,
    s: &Statements,
    me: &NodeId,
    options: &JoinOptions,
) -> Result<u64, PgError> {
    let live: Vec<NodeId> = client
        .query(&s.live, &[])
        .await
        .map_err(|e| backend(&e))?
        .iter()
        .map(|r| NodeId {
            name: r.get(0),
            incarnation: u64::try_from(r.get::<_, i64>(1)).unwrap_or(0),
        })
        .collect();
    if live.first() != Some(me) {
        return Ok(0);
    }
    let mut epochs = std::collections::BTreeMap::new();
    let mut rows = Vec::new();
    for r in client.query(&s.rows, &[]).await.map_err(|e| backend(&e))? {
        let (Ok(id), epoch) = (u16::try_from(r.get::<_, i32>(0)), r.get::<_, i64>(1)) else {
            continue;
        };
        epochs.insert(id, epoch);
        let owner = r.get::<_, Option<String>>(2).map(|name| NodeId {
            name,
            incarnation: u64::try_from(r.get::<_, Option<i64>>(3).unwrap_or(0)).unwrap_or(0),
        });
        let handover = r
            .get::<_, Option<String>>(4)
            .map(|to| (to, r.get::<_, Option<bool>>(5).unwrap_or(false)));
        rows.push(ShardRow {
            id,
            owner,
            handover,
        });
    }
    let steps = super::plan::plan(&rows, &live, options.max_handovers);
    let due = ms(options.handover_deadline_ms);
    let changes = join_all(steps.iter().map(|step| {
        let (shard, epoch) = match step {
            Step::Assign { shard, .. } | Step::Mark { shard, .. } | Step::Unmark { shard } => {
                (i32::from(*shard), epochs[shard])
            }
        };
        async move {
            match step {
                Step::Assign { to, .. } => {
                    let inc = ms(to.incarnation);
                    client
                        .execute(&s.assign, &[&shard, &epoch, &to.name, &inc])
                        .await
                }
                Step::Mark { to, .. } => client.execute(&s.mark, &[&shard, &epoch, to, &due]).await,
                Step::Unmark { .. } => client.execute(&s.unmark, &[&shard, &epoch]).await,
            }
        }
    }))
    .await;
    let mut changed = 0;
    for (step, result) in steps.iter().zip(changes) {
        match result {
            Ok(n) => {
                changed += n;
                if n > 0 {
                    tracing::info!(node = %me.name, ?step, "cluster: shard assignment changed");
                }
            }
            // A row locked by a commit that does not end (its session paused) is retried at the
            // next round.
            Err(e) => {
                tracing::warn!(node = %me.name, ?step, error = %describe(&e), "cluster: a step failed");
            }
        }
    }
    Ok(changed)
}

/// The owner's handover of `shard` (stopped) from `epoch`: to the node it is marked for if
/// that one is live, otherwise to nobody. `Ok(None)` also when it was no longer this node's.
pub(super) async fn hand_over(
    client: &Client,
    s: &Statements,
    me: &NodeId,
    shard: u16,
    epoch: u64,
) -> Result<Option<String>, PgError> {
    let (shard, epoch, inc) = (i32::from(shard), ms(epoch), ms(me.incarnation));
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] = [&shard, &epoch, &me.name, &inc];
    if let Some(row) = client
        .query_opt(&s.hand_over, &params)
        .await
        .map_err(|e| backend(&e))?
    {
        return Ok(Some(row.get(0)));
    }
    client
        .execute(&s.release, &params)
        .await
        .map_err(|e| backend(&e))?;
    Ok(None)
}

/// Leaving: every shard let go (each under its next epoch), then the lease ended.
pub(super) async fn leave(
    client: &Client,
    s: &Statements,
    me: &NodeId,
    owned: &std::collections::BTreeMap<u16, ShardTerm>,
    timeout: Duration,
) -> Result<(), PgError> {
    let inc = ms(me.incarnation);
    let work = async {
        for (shard, term) in owned {
            let (shard, epoch) = (i32::from(*shard), ms(term.epoch));
            client
                .execute(&s.release, &[&shard, &epoch, &me.name, &inc])
                .await
                .map_err(|e| backend(&e))?;
        }
        client
            .execute(&s.lapse, &[&me.name, &inc])
            .await
            .map_err(|e| backend(&e))?;
        Ok(())
    };
    tokio::time::timeout(timeout, work)
        .await
        .unwrap_or_else(|_| Err(PgError::Backend("leaving took too long".into())))
}
