//! The reads a relay asks its shell for ([`ReadRequest`]), as the very [`StoreRead`] calls it
//! would have made, and their outcomes ([`ReadDone`]).

use crate::store::{Expiries, Rows, StoreError, StoreRead, Table};

/// Identifies a [`ReadRequest`] until its [`ReadDone`] comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReadId(pub u64);

/// One read of the store, as [`StoreRead`] offers them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ReadOp {
    /// [`StoreRead::get`].
    Get {
        /// The table.
        table: Table,
        /// The row's key.
        key: String,
    },
    /// [`StoreRead::scan_prefix`], or with a bound [`StoreRead::scan_prefix_max`].
    ScanPrefix {
        /// The table.
        table: Table,
        /// The keys' prefix.
        prefix: String,
        /// Rows at most (`None`: all).
        max: Option<usize>,
    },
    /// [`StoreRead::scan_prefixes`]: several scans in one read (the expiry sweep's due
    /// queues), the rows of each prefix in the order given. It answers each of those scans
    /// ([`ReadOp::ScanPrefix`] without a bound) on its own.
    ScanPrefixes {
        /// The table.
        table: Table,
        /// The keys' prefixes, sorted, none a prefix of another (so the rows come back in key
        /// order, and the prefix of a key is found by a binary search); shared, since the rows
        /// read ahead index the read by each of them.
        prefixes: std::sync::Arc<[String]>,
    },
    /// [`StoreRead::scan_range`]: a page of a queue.
    ScanRange {
        /// The table.
        table: Table,
        /// The first key the range holds.
        start: String,
        /// The range ends before this key.
        end: String,
        /// Rows at most.
        max: usize,
    },
    /// [`StoreRead::scan_page`].
    ScanPage {
        /// The table.
        table: Table,
        /// The page starts after this key.
        after: Option<String>,
        /// Rows at most.
        limit: usize,
    },
    /// [`StoreRead::latest_expiries`].
    LatestExpiries {
        /// The table.
        table: Table,
        /// Milliseconds before the latest expiry.
        window: u64,
    },
    /// [`StoreRead::next_expiry`].
    NextExpiry {
        /// The table.
        table: Table,
        /// The expiry must come after this.
        after: u64,
    },
    /// [`StoreRead::expired`].
    Expired {
        /// The table.
        table: Table,
        /// Expiries at or before this.
        up_to: u64,
        /// The page starts after this row (expiry and key).
        after: Option<(u64, String)>,
        /// Keys at most.
        limit: usize,
    },
}

/// What a [`ReadOp`] returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadValue {
    /// A row's value, if the row exists.
    Row(Option<Vec<u8>>),
    /// Rows in key order.
    Rows(Rows),
    /// Keys with their expiries.
    Expiries(Expiries),
    /// An expiry, if any.
    Expiry(Option<u64>),
}

impl ReadValue {
    /// Estimated heap of the value (keys and values, plus a small overhead per row).
    pub(super) fn bytes(&self) -> usize {
        match self {
            Self::Row(v) => v.as_ref().map_or(0, Vec::len),
            Self::Rows(rows) => rows.iter().map(|(k, v)| k.len() + v.len() + 48).sum(),
            Self::Expiries(keys) => keys.iter().map(|(k, _)| k.len() + 32).sum(),
            Self::Expiry(_) => 0,
        }
    }
}

impl ReadOp {
    /// Runs the read on `reader` (the shell's, off the relay's task).
    pub fn run(&self, reader: &mut dyn StoreRead) -> Result<ReadValue, StoreError> {
        Ok(match self {
            Self::Get { table, key } => ReadValue::Row(reader.get(*table, key)?),
            Self::ScanPrefix {
                table,
                prefix,
                max: None,
            } => ReadValue::Rows(reader.scan_prefix(*table, prefix)?),
            Self::ScanPrefix {
                table,
                prefix,
                max: Some(max),
            } => ReadValue::Rows(reader.scan_prefix_max(*table, prefix, *max)?),
            Self::ScanPrefixes { table, prefixes } => {
                ReadValue::Rows(reader.scan_prefixes(*table, prefixes)?)
            }
            Self::ScanRange {
                table,
                start,
                end,
                max,
            } => ReadValue::Rows(reader.scan_range(*table, start, end, *max)?),
            Self::ScanPage {
                table,
                after,
                limit,
            } => ReadValue::Rows(reader.scan_page(*table, after.as_deref(), *limit)?),
            Self::LatestExpiries { table, window } => {
                ReadValue::Expiries(reader.latest_expiries(*table, *window)?)
            }
            Self::NextExpiry { table, after } => {
                ReadValue::Expiry(reader.next_expiry(*table, *after)?)
            }
            Self::Expired {
                table,
                up_to,
                after,
                limit,
            } => {
                let after = after.as_ref().map(|(at, k)| (*at, k.as_str()));
                ReadValue::Expiries(reader.expired(*table, *up_to, after, *limit)?)
            }
        })
    }

    fn table(&self) -> Table {
        match self {
            Self::Get { table, .. }
            | Self::ScanPrefix { table, .. }
            | Self::ScanPrefixes { table, .. }
            | Self::ScanRange { table, .. }
            | Self::ScanPage { table, .. }
            | Self::LatestExpiries { table, .. }
            | Self::NextExpiry { table, .. }
            | Self::Expired { table, .. } => *table,
        }
    }

    /// Whether a write to `key` of `table` may change what this read returns, so that its
    /// result is stale (an expiry on the table changes every read of it). The reads of an
    /// expiry index are views of the durable rows by design, never stale: the sweeps that
    /// read them arm themselves for the rows written after (`expiry::Sweep::arm`; the
    /// tombstones count the expiries not yet stored).
    pub(super) fn covers(&self, table: Table, key: Option<&str>) -> bool {
        if self.table() != table {
            return false;
        }
        match (self, key) {
            (Self::LatestExpiries { .. } | Self::NextExpiry { .. } | Self::Expired { .. }, _) => {
                false
            }
            (_, None) => true,
            (Self::Get { key: k, .. }, Some(key)) => k == key,
            (Self::ScanPrefix { prefix, .. }, Some(key)) => key.starts_with(prefix.as_str()),
            (Self::ScanPrefixes { prefixes, .. }, Some(key)) => {
                covering_prefix(prefixes, key).is_some()
            }
            // `key` may be a prefix (`Prefetch::forgotten`): the range covers it when it holds
            // a key that starts with it.
            (Self::ScanRange { start, end, .. }, Some(key)) => {
                key < end.as_str()
                    && crate::store::prefix_end(key)
                        .is_none_or(|after| start.as_str() < after.as_str())
            }
            (Self::ScanPage { after, .. }, Some(key)) => after.as_deref().is_none_or(|a| key > a),
        }
    }
}

/// The prefix among `prefixes` (sorted, none a prefix of another) that `key` starts with. The
/// greatest prefix not above `key` is the only one it can start with: a prefix between it and
/// `key` would start with it.
pub(crate) fn covering_prefix<'a>(prefixes: &'a [String], key: &str) -> Option<&'a str> {
    let i = prefixes.partition_point(|p| p.as_str() <= key);
    let p = prefixes.get(i.checked_sub(1)?)?;
    key.starts_with(p.as_str()).then_some(p.as_str())
}

/// A read the relay needs done before a parked frame can run again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRequest {
    /// Hand it back in the [`ReadDone`].
    pub id: ReadId,
    /// What to read.
    pub op: ReadOp,
}

impl ReadRequest {
    /// Runs the read on `reader` (off the relay's task) and makes its report.
    pub fn run(&self, reader: &mut dyn StoreRead) -> ReadDone {
        ReadDone {
            id: self.id,
            result: self.op.run(reader),
        }
    }
}

/// The outcome of a [`ReadRequest`], for [`Relay::handle_read`](crate::Relay::handle_read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadDone {
    /// The request's id.
    pub id: ReadId,
    /// What the read returned, or why it failed.
    pub result: Result<ReadValue, StoreError>,
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::covering_prefix;

    proptest! {
        /// The binary search finds the same prefix as a scan of every prefix, for sorted
        /// prefixes none of which is a prefix of another (a queue's: `recipient/conv/`).
        #[test]
        fn finds_the_prefix_a_scan_finds(
            queues in proptest::collection::btree_set(("[a-c]{1,3}", "[a-c]{1,3}"), 0..12),
            key in ("[a-c]{0,3}", proptest::option::of("[a-c]{0,3}"), proptest::option::of("[0-9]{1,2}")),
        ) {
            let mut sorted: Vec<String> = queues.iter().map(|(r, c)| format!("{r}/{c}/")).collect();
            sorted.sort();
            let key = match key {
                (r, Some(c), Some(seq)) => format!("{r}/{c}/{seq}"),
                (r, Some(c), None) => format!("{r}/{c}"),
                (r, None, _) => r,
            };
            let scanned = sorted.iter().find(|p| key.starts_with(p.as_str())).map(String::as_str);
            prop_assert_eq!(covering_prefix(&sorted, &key), scanned);
        }
    }
}
