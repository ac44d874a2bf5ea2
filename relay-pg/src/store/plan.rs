//! A batch reduced to its net effect per table: what one commit sends. The reduction
//! leaves exactly the state applying the batch in order leaves:
//! * Of the keyed writes (`Put`, `PutExpiring`, `Delete`) only the last one of each
//!   (table, key) is kept: it replaces whatever the earlier ones, and any range expiry before
//!   it, left in that row.
//! * The range expiries (`Expire`) of one table become one, reaching the largest `up_to`, and
//!   run before the table's keyed writes. A row the batch does not write keeps its expiry during
//!   the batch, so some expiry of the batch deletes it exactly when the largest one does; a row
//!   the batch writes is settled by its last write, whatever ran before.
//! * A kept `PutExpiring` that an `Expire` later in the batch reaches (`expires_at <= up_to`) is
//!   sent as a delete: that expiry would have deleted it. Any other kept write is sent as is.
//! * A plain `Put` in an expiring table writes `expires_at = NULL`: the row never expires.
//!
//! Within a table the keyed upserts and deletes then touch disjoint keys, so their statements
//! commute, and they come after the table's one range delete; tables do not interact.

use std::collections::BTreeMap;

use relay_core::store::{Batch, MutationRef, Table};

use super::{MAX_ROW_BYTES, no_expiry};
use crate::PgError;

/// The net effect of a batch on one table (see the module doc).
#[derive(Debug, Default)]
pub(super) struct TableOps {
    /// Rows expiring at or before this are deleted first: the largest `up_to` of the batch's
    /// expiries of this table, if any.
    pub(super) expire_up_to: Option<i64>,
    /// Rows to insert or replace.
    pub(super) put_keys: Vec<String>,
    pub(super) put_values: Vec<Vec<u8>>,
    /// The expiry of each row of `put_keys` (NULL: none). Sent only for expiring tables, where
    /// every upsert sets the column; always `None` in the others.
    pub(super) put_expiries: Vec<Option<i64>>,
    /// Rows to delete (disjoint from `put_keys`).
    pub(super) delete_keys: Vec<String>,
}

/// A batch reduced to its net effect per table (rules in the module doc).
#[derive(Debug)]
pub(super) struct Plan(pub(super) BTreeMap<Table, TableOps>);

/// The last keyed write of one row, as it is sent.
enum RowOp {
    Upsert(Vec<u8>, Option<i64>),
    Delete,
}

/// An epoch-millisecond expiry as PostgreSQL's BIGINT.
fn sql_ms(ms: u64) -> Result<i64, PgError> {
    i64::try_from(ms).map_err(|_| {
        PgError::Backend(format!(
            "expiry {ms} is beyond the largest storable ({}); nothing was sent",
            i64::MAX
        ))
    })
}

impl Plan {
    pub(super) fn new(batch: &Batch) -> Result<Self, PgError> {
        let too_large = |what: &str, len: usize| {
            PgError::Backend(format!(
                "a {what} of {len} bytes exceeds MAX_ROW_BYTES ({MAX_ROW_BYTES}); nothing was sent"
            ))
        };
        let mut tables: BTreeMap<Table, TableOps> = BTreeMap::new();
        // Latest `up_to` of the expiries after the current position, per table.
        let mut later_expiry: BTreeMap<Table, u64> = BTreeMap::new();
        let mut last: BTreeMap<(Table, String), RowOp> = BTreeMap::new();
        // Backwards: the first write of a row met is its last in the batch, and every expiry
        // that follows it in the batch has been seen.
        for m in batch.iter().rev() {
            let table = m.table();
            if m.misplaces_an_expiry() {
                return Err(no_expiry(table));
            }
            if let Some(key) = m.key()
                && key.len() > MAX_ROW_BYTES
            {
                return Err(too_large("key", key.len()));
            }
            let (key, op) = match m {
                MutationRef::Expire { up_to, .. } => {
                    let latest = later_expiry.entry(table).or_insert(up_to);
                    *latest = (*latest).max(up_to);
                    // Every stored expiry is at most `i64::MAX`: beyond it is the same as at it.
                    let up_to = i64::try_from(up_to).unwrap_or(i64::MAX);
                    let ops = tables.entry(table).or_default();
                    ops.expire_up_to = ops.expire_up_to.max(Some(up_to));
                    continue;
                }
                MutationRef::Delete { key, .. } => (key, RowOp::Delete),
                MutationRef::Put { key, value, .. } => {
                    if value.len() > MAX_ROW_BYTES {
                        return Err(too_large("value", value.len()));
                    }
                    (key, RowOp::Upsert(value.to_vec(), None))
                }
                MutationRef::PutExpiring {
                    key,
                    value,
                    expires_at,
                    ..
                } => {
                    if value.len() > MAX_ROW_BYTES {
                        return Err(too_large("value", value.len()));
                    }
                    let at = sql_ms(expires_at)?;
                    let expired_later = later_expiry
                        .get(&table)
                        .is_some_and(|&up_to| expires_at <= up_to);
                    if expired_later {
                        (key, RowOp::Delete)
                    } else {
                        (key, RowOp::Upsert(value.to_vec(), Some(at)))
                    }
                }
            };
            last.entry((table, key.to_owned())).or_insert(op);
        }
        for ((table, key), op) in last {
            let ops = tables.entry(table).or_default();
            match op {
                RowOp::Upsert(value, expires_at) => {
                    ops.put_keys.push(key);
                    ops.put_values.push(value);
                    ops.put_expiries.push(expires_at);
                }
                RowOp::Delete => ops.delete_keys.push(key),
            }
        }
        Ok(Self(tables))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_core::store::Batch;
    use relay_core::store::Mutation;

    fn put(table: Table, key: &str, value: &str) -> Mutation {
        Mutation::Put {
            table,
            key: key.into(),
            value: value.as_bytes().to_vec(),
        }
    }

    fn put_exp(table: Table, key: &str, value: &str, expires_at: u64) -> Mutation {
        Mutation::PutExpiring {
            table,
            key: key.into(),
            value: value.as_bytes().to_vec(),
            expires_at,
        }
    }

    fn del(table: Table, key: &str) -> Mutation {
        Mutation::Delete {
            table,
            key: key.into(),
        }
    }

    fn expire(table: Table, up_to: u64) -> Mutation {
        Mutation::Expire { table, up_to }
    }

    /// Rows with their expiry, as the database holds them.
    type State = BTreeMap<(Table, String), (Vec<u8>, Option<u64>)>;

    /// Applies a batch in order to `state`: the naive model the plan must agree with.
    fn apply_in_order(mut state: State, batch: &Batch) -> State {
        for m in batch {
            match m {
                MutationRef::Put { table, key, value } => {
                    state.insert((table, key.to_owned()), (value.to_vec(), None));
                }
                MutationRef::PutExpiring {
                    table,
                    key,
                    value,
                    expires_at,
                } => {
                    state.insert((table, key.to_owned()), (value.to_vec(), Some(expires_at)));
                }
                MutationRef::Delete { table, key } => {
                    state.remove(&(table, key.to_owned()));
                }
                MutationRef::Expire { table, up_to } => {
                    state.retain(|(t, _), (_, at)| {
                        !(*t == table && at.is_some_and(|at| at <= up_to))
                    });
                }
            }
        }
        state
    }

    /// Applies a plan to `state` the way the pipeline does: per table the range expiry, then
    /// the upserts, then the deletes.
    fn apply_plan(mut state: State, plan: &Plan) -> State {
        for (table, ops) in &plan.0 {
            if let Some(up_to) = ops.expire_up_to {
                let up_to = u64::try_from(up_to).unwrap();
                state.retain(|(t, _), (_, at)| !(t == table && at.is_some_and(|at| at <= up_to)));
            }
            assert_eq!(ops.put_keys.len(), ops.put_values.len());
            assert_eq!(ops.put_keys.len(), ops.put_expiries.len());
            for ((k, v), at) in ops
                .put_keys
                .iter()
                .zip(&ops.put_values)
                .zip(&ops.put_expiries)
            {
                assert!(table.has_expiry() || at.is_none());
                let at = at.map(|at| u64::try_from(at).unwrap());
                state.insert((*table, k.clone()), (v.clone(), at));
            }
            for k in &ops.delete_keys {
                assert!(!ops.put_keys.contains(k), "puts and deletes are disjoint");
                state.remove(&(*table, k.clone()));
            }
        }
        state
    }

    #[test]
    fn a_plan_keeps_the_last_mutation_of_each_key() {
        let batch: Batch = vec![
            put(Table::Accounts, "a", "1"),
            put(Table::Accounts, "a", "2"),
            put(Table::Messages, "x", "m"),
            del(Table::Messages, "x"),
            del(Table::Messages, "y"),
            put(Table::Messages, "y", "back"),
            put(Table::Meta, "a", "meta"),
        ]
        .into();
        let model = apply_in_order(State::new(), &batch);
        let plan = Plan::new(&batch).unwrap();
        assert_eq!(apply_plan(State::new(), &plan), model);
        assert_eq!(plan.0[&Table::Accounts].put_values, [b"2".to_vec()]);
        assert_eq!(plan.0[&Table::Messages].delete_keys, ["x"]);
        assert!(plan.0.values().all(|ops| ops.expire_up_to.is_none()));
    }

    #[test]
    fn an_expiry_goes_first_and_a_row_it_would_expire_later_is_deleted() {
        let t = Table::Tombstones;
        let batch: Batch = vec![
            put_exp(t, "k", "old", 10),
            put_exp(t, "gone", "x", 10),
            expire(t, 50),
            put_exp(t, "k", "new", 90),
            put_exp(t, "due", "y", 60),
            put_exp(t, "kept", "z", 200),
            put(t, "plain", "p"),
            expire(t, 70),
            expire(t, 20),
        ]
        .into();
        let plan = Plan::new(&batch).unwrap();
        let ops = &plan.0[&t];
        assert_eq!(ops.expire_up_to, Some(70));
        assert_eq!(ops.put_keys, ["k", "kept", "plain"]);
        assert_eq!(ops.put_expiries, [Some(90), Some(200), None]);
        assert_eq!(ops.delete_keys, ["due", "gone"]);
        let before: State = [
            ((t, "old".to_owned()), (b"o".to_vec(), Some(65))),
            ((t, "late".to_owned()), (b"l".to_vec(), Some(71))),
            ((t, "due".to_owned()), (b"d".to_vec(), None)),
        ]
        .into();
        assert_eq!(
            apply_plan(before.clone(), &plan),
            apply_in_order(before, &batch)
        );
    }

    #[test]
    fn expiries_out_of_range_and_on_plain_tables_are_refused() {
        let refused = |batch: Vec<Mutation>| Plan::new(&batch.into()).unwrap_err().to_string();
        assert!(refused(vec![put_exp(Table::Accounts, "u", "v", 5)]).contains("accounts"));
        assert!(refused(vec![expire(Table::Meta, 5)]).contains("meta"));
        assert!(refused(vec![put_exp(Table::Tombstones, "u", "v", u64::MAX)]).contains("expiry"));
        // Beyond every storable expiry is the same as at the largest one.
        let plan = Plan::new(&vec![expire(Table::Tombstones, u64::MAX)].into()).unwrap();
        assert_eq!(plan.0[&Table::Tombstones].expire_up_to, Some(i64::MAX));
    }

    /// A small deterministic generator (no RNG crate needed for test data).
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self, bound: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 33) % bound
        }
    }

    /// Random batches over a few keys of an expiring and a plain table, on random starting
    /// rows: the plan leaves exactly the rows and expiries that applying the batch in order does.
    #[test]
    fn plans_agree_with_applying_the_batch_in_order() {
        let mut rng = Lcg(7);
        let tables = [Table::Tombstones, Table::Accounts];
        for round in 0..2_000 {
            let mut before = State::new();
            for key in ["a", "b", "c", "d"] {
                match rng.next(3) {
                    0 => {}
                    1 => {
                        before.insert((Table::Tombstones, key.into()), (b"s".to_vec(), None));
                    }
                    _ => {
                        let at = rng.next(100);
                        before.insert((Table::Tombstones, key.into()), (b"s".to_vec(), Some(at)));
                    }
                }
            }
            let batch: Batch = (0..rng.next(12))
                .map(|i| {
                    let table = tables[rng.next(2) as usize];
                    let key = ["a", "b", "c", "d"][rng.next(4) as usize];
                    let value = format!("{round}.{i}");
                    match (rng.next(4), table.has_expiry()) {
                        (0, _) => del(table, key),
                        (1, true) => expire(table, rng.next(100)),
                        (2, true) => put_exp(table, key, &value, rng.next(100)),
                        _ => put(table, key, &value),
                    }
                })
                .collect();
            let model = apply_in_order(before.clone(), &batch);
            let plan = Plan::new(&batch).unwrap();
            let planned = apply_plan(before, &plan);
            assert_eq!(planned, model, "round {round}: {batch:?}");
        }
    }
}
