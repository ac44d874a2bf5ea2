//! Schema creation and versioned migrations (`relay-pg/migrations/NNNN_*.sql`, embedded).
//!
//! * **Bootstrap** (any candidate, before campaigning): creates the schema and the
//!   `schema_migrations` bookkeeping table if missing, under a transaction-level advisory lock so
//!   that two relays starting together do not race, and refuses a newer schema early.
//! * **Migrate** (the new leader only, holding the leadership lock): in one transaction, bumps
//!   the epoch first when the `leader` table already exists (which waits for, then fences off, the
//!   previous leader's in-flight commits), applies the pending migrations, creates any relay table
//!   the migrations do not know yet (tables are additive, as for `SqliteStore`; an expiring one
//!   with its `expires_at` column and index), checks that every expiring table has that column,
//!   and bumps the
//!   epoch if it could not do so before, and finally checks and records the fingerprints of the
//!   relay's keys ([`crate::keys`]), all in the same transaction. A standby running a newer build
//!   therefore never changes the schema under a running older leader, and a candidate whose keys
//!   are refused leaves nothing behind. A schema that holds a cluster is refused.
//! * **A cluster node** migrates in its join transaction ([`migrate_pending`], under the
//!   cluster's lock; see `crate::cluster`).

use std::collections::{BTreeMap, BTreeSet};

use relay_core::store::Table;
use tokio_postgres::Client;

use crate::{
    PgError,
    error::describe,
    keys::{self, KeyClaim, KeyEvent, KeyKind},
};

/// One embedded migration file.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Version it brings the schema to (1, 2, … without gaps).
    pub version: i64,
    /// File name without `.sql`, recorded in `schema_migrations`.
    pub name: &'static str,
    /// The SQL, run in the relay's schema inside the migrating transaction.
    pub sql: &'static str,
}

/// Every migration, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_kv_tables",
        sql: include_str!("../migrations/0001_kv_tables.sql"),
    },
    Migration {
        version: 2,
        name: "0002_leadership",
        sql: include_str!("../migrations/0002_leadership.sql"),
    },
    Migration {
        version: 3,
        name: "0003_key_fingerprints",
        sql: include_str!("../migrations/0003_key_fingerprints.sql"),
    },
    Migration {
        version: 4,
        name: "0004_spent_credentials",
        sql: include_str!("../migrations/0004_spent_credentials.sql"),
    },
    Migration {
        version: 5,
        name: "0005_tombstone_expiry",
        sql: include_str!("../migrations/0005_tombstone_expiry.sql"),
    },
    Migration {
        version: 6,
        name: "0006_account_index",
        sql: include_str!("../migrations/0006_account_index.sql"),
    },
    Migration {
        version: 7,
        name: "0007_contacts_queue_index",
        sql: include_str!("../migrations/0007_contacts_queue_index.sql"),
    },
    Migration {
        version: 8,
        name: "0008_queue_expiry",
        sql: include_str!("../migrations/0008_queue_expiry.sql"),
    },
    Migration {
        version: 9,
        name: "0009_cluster",
        sql: include_str!("../migrations/0009_cluster.sql"),
    },
];

/// Schema version written by this build (the last migration's).
pub const SCHEMA_VERSION: i64 = 9;

/// First version that has the `leader` row and `relay_fence`.
pub(crate) const LEADER_VERSION: i64 = 2;

/// First version that has the cluster's tables and `relay_fence_shard`.
pub(crate) const CLUSTER_VERSION: i64 = 9;

/// Advisory-lock class of the bootstrap transaction lock (`'RLYM'`); the low half is the
/// schema name's hash.
const BOOTSTRAP_LOCK_CLASS: i64 = 0x524C_594D;

fn backend(e: &tokio_postgres::Error) -> PgError {
    PgError::Backend(describe(e))
}

/// Creates the schema and the bookkeeping table when missing; returns the current version.
pub(crate) async fn bootstrap(client: &mut Client, schema: &str) -> Result<i64, PgError> {
    let tx = client.transaction().await.map_err(|e| backend(&e))?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(($1::bigint << 32) | (hashtext($2)::bigint & 4294967295))",
        &[&BOOTSTRAP_LOCK_CLASS, &schema],
    )
    .await
    .map_err(|e| backend(&e))?;
    let exists = tx
        .query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&schema])
        .await
        .map_err(|e| backend(&e))?
        .is_some();
    if !exists {
        // `schema` is validated to [a-z0-9_] by `PgConfig::with_schema`.
        tx.batch_execute(&format!("CREATE SCHEMA \"{schema}\""))
            .await
            .map_err(|e| backend(&e))?;
        tracing::info!(schema, "created the relay schema");
    }
    let has_bookkeeping = tx
        .query_one(
            "SELECT to_regclass(format('%I.schema_migrations', $1::text)) IS NOT NULL",
            &[&schema],
        )
        .await
        .map_err(|e| backend(&e))?
        .get::<_, bool>(0);
    if !has_bookkeeping {
        tx.batch_execute(&format!(
            "CREATE TABLE \"{schema}\".schema_migrations (
                version    BIGINT PRIMARY KEY,
                name       TEXT NOT NULL,
                applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
            )"
        ))
        .await
        .map_err(|e| backend(&e))?;
    }
    let found = version_in(&tx, schema).await?;
    tx.commit().await.map_err(|e| backend(&e))?;
    refuse_newer(found)?;
    Ok(found)
}

/// The schema's version as `schema_migrations` records it (0 for none).
pub(crate) async fn version_in(
    tx: &tokio_postgres::Transaction<'_>,
    schema: &str,
) -> Result<i64, PgError> {
    let row = tx
        .query_one(
            &format!("SELECT coalesce(max(version), 0) FROM \"{schema}\".schema_migrations"),
            &[],
        )
        .await
        .map_err(|e| backend(&e))?;
    Ok(row.get(0))
}

fn refuse_newer(found: i64) -> Result<(), PgError> {
    if found > SCHEMA_VERSION {
        return Err(PgError::SchemaVersion {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(())
}

/// The leader's transaction: migrate to [`SCHEMA_VERSION`], take the next epoch and check the
/// key fingerprints (see the module doc for the order). The session's `search_path` is the
/// relay's schema. Returns the epoch and what the key check did (to log once committed).
pub(crate) async fn migrate_and_bump(
    client: &mut Client,
    schema: &str,
    holder: &str,
    claims: &BTreeMap<KeyKind, KeyClaim>,
) -> Result<(i64, Vec<KeyEvent>), PgError> {
    let tx = client.transaction().await.map_err(|e| backend(&e))?;
    let found = version_in(&tx, schema).await?;
    let mut epoch = None;
    if found >= LEADER_VERSION {
        epoch = Some(bump(&tx, holder).await?);
    }
    migrate_pending(&tx, schema, found).await?;
    let epoch = match epoch {
        Some(epoch) => epoch,
        None => bump(&tx, holder).await?,
    };
    // After the bump, whose row lock orders this with a cluster's creation (which takes the
    // epoch from 0 to 1 under the same lock): a cluster's schema has no leader.
    if let Some(row) = tx
        .query_opt("SELECT shards FROM cluster WHERE id = 1", &[])
        .await
        .map_err(|e| backend(&e))?
    {
        let shards: i32 = row.get(0);
        return Err(PgError::WrongMode(format!(
            "schema {schema} belongs to a cluster of {shards} shards: start this relay as a \
             node of that cluster, not as an active/standby relay"
        )));
    }
    // After the bump: the epoch row's update lock, held to the commit, serializes this with
    // every other candidate's transaction. On an error the transaction rolls back when dropped.
    let events = keys::check_and_record(&tx, schema, claims, holder, epoch).await?;
    tx.commit().await.map_err(|e| backend(&e))?;
    Ok((epoch, events))
}

/// Applies the migrations after version `found` (a newer schema is refused), creates the
/// tables of relay-core that no migration knows and checks the expiring tables' columns, in
/// the caller's transaction.
pub(crate) async fn migrate_pending(
    tx: &tokio_postgres::Transaction<'_>,
    schema: &str,
    found: i64,
) -> Result<(), PgError> {
    refuse_newer(found)?;
    for m in MIGRATIONS.iter().filter(|m| m.version > found) {
        tx.batch_execute(m.sql)
            .await
            .map_err(|e| PgError::Backend(format!("migration {}: {}", m.name, describe(&e))))?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
            &[&m.version, &m.name],
        )
        .await
        .map_err(|e| backend(&e))?;
        tracing::info!(schema, migration = m.name, "applied migration");
    }
    create_missing_tables(tx, schema).await?;
    check_expiry_columns(tx, schema).await
}

async fn bump(tx: &tokio_postgres::Transaction<'_>, holder: &str) -> Result<i64, PgError> {
    let row = tx
        .query_one(
            "UPDATE leader SET epoch = epoch + 1, holder = $1, backend_pid = pg_backend_pid(), since = now()
             WHERE id = 1 RETURNING epoch",
            &[&holder],
        )
        .await
        .map_err(|e| backend(&e))?;
    Ok(row.get(0))
}

/// The SQL that creates the table of `table` as no migration does: `(k TEXT COLLATE "C" PRIMARY
/// KEY, v BYTEA NOT NULL)`, and for an expiring table ([`Table::has_expiry`]) an `expires_at
/// BIGINT` column (epoch milliseconds, NULL for a row without expiry) with its index
/// `<table>_expires_at`, the layout migration 0005 gives the tombstones.
fn create_table_sql(table: Table) -> String {
    let name = table.name();
    if table.has_expiry() {
        format!(
            "CREATE TABLE {name} (k TEXT COLLATE \"C\" PRIMARY KEY, v BYTEA NOT NULL, expires_at BIGINT); \
             CREATE INDEX {name}_expires_at ON {name} (expires_at, k)"
        )
    } else {
        format!("CREATE TABLE {name} (k TEXT COLLATE \"C\" PRIMARY KEY, v BYTEA NOT NULL)")
    }
}

/// Creates the table of every [`Table`] the migrations did not create (a table added to
/// relay-core after the last migration), with [`create_table_sql`].
async fn create_missing_tables(
    tx: &tokio_postgres::Transaction<'_>,
    schema: &str,
) -> Result<(), PgError> {
    let existing = table_names(
        tx,
        "SELECT tablename::text FROM pg_tables WHERE schemaname = $1",
        schema,
    )
    .await?;
    for table in Table::ALL {
        if !existing.contains(table.name()) {
            tx.batch_execute(&create_table_sql(table))
                .await
                .map_err(|e| backend(&e))?;
            tracing::info!(
                schema,
                table = table.name(),
                "created a table no migration knows"
            );
        }
    }
    Ok(())
}

/// The table names `sql` (one text column, the schema as `$1`) returns.
async fn table_names(
    tx: &tokio_postgres::Transaction<'_>,
    sql: &str,
    schema: &str,
) -> Result<BTreeSet<String>, PgError> {
    Ok(tx
        .query(sql, &[&schema])
        .await
        .map_err(|e| backend(&e))?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

/// Refuses to lead when an expiring table ([`Table::has_expiry`]) has no `expires_at` column: a
/// table that became expiring in relay-core without a migration adding (and filling) the column.
/// The store's statements could not even be prepared, and filling the column is the migration's
/// work (each row's expiry is in its record), so this fails early and names the table.
async fn check_expiry_columns(
    tx: &tokio_postgres::Transaction<'_>,
    schema: &str,
) -> Result<(), PgError> {
    let with_column = table_names(
        tx,
        "SELECT table_name::text FROM information_schema.columns \
         WHERE table_schema = $1 AND column_name = 'expires_at'",
        schema,
    )
    .await?;
    match Table::ALL
        .into_iter()
        .find(|t| t.has_expiry() && !with_column.contains(t.name()))
    {
        Some(table) => Err(PgError::Backend(format!(
            "table {} has rows with an expiry but no expires_at column: no migration adds it",
            table.name()
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_numbered_without_gaps_and_match_their_files() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i64 + 1);
            assert!(
                m.name.starts_with(&format!("{:04}_", m.version)),
                "{}",
                m.name
            );
            assert!(!m.sql.trim().is_empty());
        }
        assert_eq!(MIGRATIONS.last().map(|m| m.version), Some(SCHEMA_VERSION));
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        files.sort();
        let names: Vec<String> = MIGRATIONS
            .iter()
            .map(|m| format!("{}.sql", m.name))
            .collect();
        assert_eq!(
            files, names,
            "every file in migrations/ is embedded, in order"
        );
    }
}
