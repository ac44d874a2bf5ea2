//! Commit latency and throughput of `PgStore` for small batches, next to two naive ways of
//! writing the same batch (one statement per row, awaited one by one or pipelined) and to
//! `SqliteStore` (`synchronous=FULL`) on this machine's disk.
//!
//! ```text
//! eval "$(PG_TEST_DURABLE=1 relay-pg/scripts/pg-test-cluster.sh start /tmp/relay-pg-bench)"
//! cargo run --release -p relay-pg --example commit_bench -- [--commits N]
//! relay-pg/scripts/pg-test-cluster.sh stop /tmp/relay-pg-bench
//! ```
//!
//! Reads the database URL from `RELAY_TEST_POSTGRES_URL` (else `DATABASE_URL`); works in a
//! schema of its own, dropped at the end. One closed loop, one commit in flight: the relay core
//! commits one input at a time, so this is the rate one relay process can reach on this store.
//! Rows look like a routed message's batch: the queued message (~600 B), its tombstone (~150 B)
//! and the conversation row (~200 B), cycled for larger batches.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use relay_core::store::{Batch, Mutation, MutationRef, SqliteStore, Store, Table};
use relay_pg::{CampaignOptions, PgConfig};
use tokio_postgres::{Client, NoTls, Statement, types::ToSql};

const BATCH_SIZES: [usize; 4] = [1, 3, 10, 100];
const DEFAULT_COMMITS: usize = 2_000;

#[allow(clippy::disallowed_methods)] // a benchmark measures wall time
fn now() -> Instant {
    Instant::now()
}

fn row(i: usize, n: usize) -> Mutation {
    let uuid = "6f1c2e4a-9b1d-4c1e-8f00-1234567890ab";
    let (table, key, size) = match n % 3 {
        0 => (Table::Messages, format!("{uuid}/conv-{uuid}/{i:020}"), 600),
        1 => (Table::Tombstones, format!("{uuid}/msg-{i:012}"), 150),
        _ => (Table::Conversations, format!("conv-{uuid}-{}", i % 50), 200),
    };
    Mutation::Put {
        table,
        key,
        value: vec![b'x'; size],
    }
}

fn batch(i: usize, size: usize) -> Batch {
    (0..size).map(|n| row(i * size + n, n)).collect()
}

/// Latencies of `commits` commits of `size` rows each.
fn measure(commits: usize, size: usize, mut commit: impl FnMut(Batch)) -> Vec<Duration> {
    for i in 0..commits / 10 {
        commit(batch(1_000_000 + i, size)); // warm-up
    }
    (0..commits)
        .map(|i| {
            let b = batch(i, size);
            let start = now();
            commit(b);
            start.elapsed()
        })
        .collect()
}

fn report(what: &str, size: usize, mut latencies: Vec<Duration>) {
    latencies.sort();
    let q = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize];
    let total: Duration = latencies.iter().sum();
    let per_s = latencies.len() as f64 / total.as_secs_f64();
    println!(
        "| {what} | {size} | {} | {:.0} | {:.0} | {:.0} | {:.0} |",
        latencies.len(),
        q(0.5).as_secs_f64() * 1e6,
        q(0.99).as_secs_f64() * 1e6,
        per_s,
        per_s * size as f64
    );
}

/// The naive way: one `INSERT … ON CONFLICT` per row, each awaited (or all pipelined).
struct PerRow {
    runtime: tokio::runtime::Runtime,
    client: Client,
    begin: Statement,
    fence: Statement,
    commit: Statement,
    upsert: std::collections::BTreeMap<Table, Statement>,
    epoch: i64,
}

impl PerRow {
    fn connect(url: &str, schema: &str, epoch: u64) -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (client, begin, fence, commit, upsert) = runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap();
            tokio::spawn(connection);
            client
                .batch_execute(&format!("SET search_path TO {schema}"))
                .await
                .unwrap();
            let mut upsert = std::collections::BTreeMap::new();
            for t in [Table::Messages, Table::Tombstones, Table::Conversations] {
                let sql = format!(
                    "INSERT INTO {} (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v",
                    t.name()
                );
                upsert.insert(t, client.prepare(&sql).await.unwrap());
            }
            let begin = client.prepare("BEGIN").await.unwrap();
            let fence = client.prepare("SELECT relay_fence($1)").await.unwrap();
            let commit = client.prepare("COMMIT").await.unwrap();
            (client, begin, fence, commit, upsert)
        });
        Self {
            runtime,
            client,
            begin,
            fence,
            commit,
            upsert,
            epoch: i64::try_from(epoch).unwrap(),
        }
    }

    fn rows(batch: &Batch) -> Vec<(Table, &str, &[u8])> {
        batch
            .iter()
            .map(|m| match m {
                MutationRef::Put { table, key, value } => (table, key, value),
                MutationRef::Delete { .. }
                | MutationRef::PutExpiring { .. }
                | MutationRef::Expire { .. } => {
                    unreachable!("the benchmark's batches hold puts only")
                }
            })
            .collect()
    }

    fn sequential(&self, batch: &Batch) {
        self.runtime.block_on(async {
            let c = &self.client;
            c.execute(&self.begin, &[]).await.unwrap();
            c.execute(&self.fence, &[&self.epoch]).await.unwrap();
            for (table, key, value) in Self::rows(batch) {
                c.execute(&self.upsert[&table], &[&key, &value])
                    .await
                    .unwrap();
            }
            c.execute(&self.commit, &[]).await.unwrap();
        });
    }

    fn pipelined(&self, batch: &Batch) {
        self.runtime.block_on(async {
            let c = &self.client;
            let rows = Self::rows(batch);
            let params: Vec<[&(dyn ToSql + Sync); 2]> =
                rows.iter().map(|(_, k, v)| [k as _, v as _]).collect();
            let epoch: [&(dyn ToSql + Sync); 1] = [&self.epoch];
            let mut steps = vec![
                Box::pin(c.execute_raw(&self.begin, [] as [&(dyn ToSql + Sync); 0]))
                    as std::pin::Pin<Box<dyn Future<Output = _>>>,
                Box::pin(c.execute_raw(&self.fence, epoch)),
            ];
            for ((table, _, _), p) in rows.iter().zip(&params) {
                steps.push(Box::pin(c.execute_raw(&self.upsert[table], *p)));
            }
            steps.push(Box::pin(
                c.execute_raw(&self.commit, [] as [&(dyn ToSql + Sync); 0]),
            ));
            for r in futures_util::future::join_all(steps).await {
                r.unwrap();
            }
        });
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("commit_bench [--commits N]: PgStore commit latency (see the source's doc)");
        return;
    }
    let commits = args
        .iter()
        .position(|a| a == "--commits")
        .and_then(|i| args.get(i + 1))
        .map_or(DEFAULT_COMMITS, |n| n.parse().expect("--commits N"));
    let url = std::env::var("RELAY_TEST_POSTGRES_URL")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .expect("RELAY_TEST_POSTGRES_URL or DATABASE_URL");
    let schema = format!("bench_{}", std::process::id());
    let config = PgConfig::from_url(&url)
        .unwrap()
        .with_schema(&schema)
        .unwrap();
    let leader = relay_pg::campaign_blocking(config, CampaignOptions::default()).unwrap();
    let mut store = leader.store().unwrap();
    let per_row = PerRow::connect(&url, &schema, leader.epoch());
    let dir = std::env::temp_dir().join(format!("commit-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut sqlite = SqliteStore::open(dir.join("bench.sqlite3")).unwrap();

    println!("| store | rows per commit | commits | p50 µs | p99 µs | commits/s | rows/s |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for size in BATCH_SIZES {
        let n = if size >= 100 { commits / 4 } else { commits };
        report(
            "PgStore (pipelined; unnest per table, VALUES for one row)",
            size,
            measure(n, size, |b| store.commit(&b).unwrap()),
        );
        report(
            "per row, pipelined",
            size,
            measure(n, size, |b| per_row.pipelined(&b)),
        );
        report(
            "per row, one round trip each",
            size,
            measure(n, size, |b| per_row.sequential(&b)),
        );
        report(
            "SqliteStore (synchronous=FULL)",
            size,
            measure(n, size, |b| sqlite.commit(&b).unwrap()),
        );
    }
    drop(store);
    drop(per_row);
    leader.resign();
    std::fs::remove_dir_all(&dir).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(&url, NoTls).await.unwrap();
        tokio::spawn(connection);
        client
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
            .unwrap();
    });
}
