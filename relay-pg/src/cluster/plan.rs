//! Who should own which shard: a pure function from what the database shows (the live nodes,
//! each shard's owner and planned handover) to the changes that bring the cluster closer to an
//! even spread. The coordinator applies them, each as a compare-and-set on its shard's row
//! (`super::sql`), so a plan made from a view that has since changed does nothing.
//!
//! The rules:
//!
//! * **Quotas**: with `n` live nodes and `S` shards every node's quota is `S / n`, and the
//!   `S % n` nodes that hold the most shards now (then by name) get one more, so that a spread
//!   that is already even moves nothing.
//! * **Orphans** (no owner, or an owner whose lease lapsed: an incarnation that is not live) are
//!   assigned at once ([`Step::Assign`], which takes the shard's next epoch), to the nodes
//!   furthest below their quota.
//! * **Surplus**: a node over its quota hands shards to nodes under theirs. Such a move is
//!   *planned* ([`Step::Mark`]): the owner stops the shard and hands it over itself, or the
//!   coordinator forces it once the handover is due. At most `max_marked` handovers are planned
//!   at once. A planned handover that still fits is kept (and forced once due); one that no
//!   longer fits is dropped ([`Step::Unmark`]).

use std::collections::BTreeMap;

/// One incarnation of a node: a node that lost its lease comes back as the next incarnation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId {
    /// The node's configured name (unique in the cluster).
    pub name: String,
    /// Which life of that name this is (1, 2, …).
    pub incarnation: u64,
}

/// A shard's row as the plan reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ShardRow {
    /// The shard.
    pub id: u16,
    /// Its owner, if any (live or not).
    pub owner: Option<NodeId>,
    /// A planned handover: to which node name, and whether its deadline has passed.
    pub handover: Option<(String, bool)>,
}

/// One change of a shard's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Step {
    /// Give the shard to `to` now, under its next epoch.
    Assign {
        /// The shard.
        shard: u16,
        /// Its new owner.
        to: NodeId,
    },
    /// Ask the owner to hand the shard to the node named `to` before the deadline.
    Mark {
        /// The shard.
        shard: u16,
        /// The node it goes to.
        to: String,
    },
    /// Drop the shard's planned handover.
    Unmark {
        /// The shard.
        shard: u16,
    },
}

/// The steps towards an even spread of `shards` over `live` (see the module doc). `live` holds
/// each live node once; the result is the same whatever their order.
pub(super) fn plan(shards: &[ShardRow], live: &[NodeId], max_marked: usize) -> Vec<Step> {
    if live.is_empty() {
        return Vec::new();
    }
    let by_name: BTreeMap<&str, &NodeId> = live.iter().map(|n| (n.name.as_str(), n)).collect();
    let is_live = |owner: &Option<NodeId>| {
        owner
            .as_ref()
            .is_some_and(|o| by_name.get(o.name.as_str()).is_some_and(|n| *n == o))
    };
    // What each live node holds, in shard order.
    let mut held: BTreeMap<&str, Vec<&ShardRow>> = by_name.keys().map(|n| (*n, vec![])).collect();
    let mut orphans = Vec::new();
    for row in shards {
        match &row.owner {
            Some(o) if is_live(&row.owner) => held.entry(o.name.as_str()).or_default().push(row),
            _ => orphans.push(row.id),
        }
    }
    let quota = quotas(&held, shards.len());
    // What each node is still owed once the shards it keeps are counted.
    let mut owed: BTreeMap<&str, usize> = BTreeMap::new();
    // Shards to leave their owner: planned ones first, then the highest ids.
    let mut surplus: Vec<&ShardRow> = Vec::new();
    for (name, rows) in &held {
        let q = quota[name];
        if rows.len() > q {
            let mut rows = rows.clone();
            rows.sort_by_key(|r| (r.handover.is_none(), std::cmp::Reverse(r.id)));
            surplus.extend_from_slice(&rows[..rows.len() - q]);
        } else {
            owed.insert(name, q - rows.len());
        }
    }
    let mut steps = Vec::new();
    // Planned handovers that still fit keep their destination.
    let mut dest: BTreeMap<u16, &str> = BTreeMap::new();
    for row in &surplus {
        if let Some((to, _)) = &row.handover
            && let Some((name, _)) = owed.get_key_value(to.as_str())
            && owed[name] > 0
        {
            let name: &str = name;
            owed.entry(name).and_modify(|left| *left -= 1);
            dest.insert(row.id, name);
        }
    }
    let mut next_owed = || {
        let (name, left) = owed
            .iter_mut()
            .filter(|(_, left)| **left > 0)
            .max_by_key(|(name, left)| (**left, std::cmp::Reverse(**name)))?;
        *left -= 1;
        Some(*name)
    };
    for shard in orphans {
        if let Some(name) = next_owed() {
            let to = by_name[name].clone();
            steps.push(Step::Assign { shard, to });
        }
    }
    for row in &surplus {
        if !dest.contains_key(&row.id)
            && let Some(name) = next_owed()
        {
            dest.insert(row.id, name);
        }
    }
    // Planned handovers: forced once due if they still fit, retargeted or dropped if not.
    let mut marked = 0;
    for row in held.values().flatten() {
        let Some((to, due)) = &row.handover else {
            continue;
        };
        match dest.get(&row.id) {
            Some(d) if *d == to.as_str() && *due => steps.push(Step::Assign {
                shard: row.id,
                to: by_name[*d].clone(),
            }),
            Some(d) if *d == to.as_str() => marked += 1,
            Some(d) if marked < max_marked => {
                marked += 1;
                steps.push(Step::Mark {
                    shard: row.id,
                    to: (*d).to_owned(),
                });
            }
            _ => steps.push(Step::Unmark { shard: row.id }),
        }
    }
    for row in surplus {
        if row.handover.is_some() {
            continue;
        }
        if let Some(to) = dest.get(&row.id)
            && marked < max_marked
        {
            marked += 1;
            steps.push(Step::Mark {
                shard: row.id,
                to: (*to).to_owned(),
            });
        }
    }
    steps
}

/// Each live node's quota: `total / n`, plus one for the `total % n` nodes holding the most
/// now (then by name).
fn quotas<'a>(held: &BTreeMap<&'a str, Vec<&ShardRow>>, total: usize) -> BTreeMap<&'a str, usize> {
    let n = held.len();
    let (base, extra) = (total / n, total % n);
    let mut order: Vec<(&str, usize)> = held.iter().map(|(n, r)| (*n, r.len())).collect();
    order.sort_by_key(|(name, count)| (std::cmp::Reverse(*count), *name));
    order
        .iter()
        .enumerate()
        .map(|(i, (name, _))| (*name, base + usize::from(i < extra)))
        .collect()
}

#[cfg(test)]
mod tests;
