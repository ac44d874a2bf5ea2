use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

fn node(name: &str, incarnation: u64) -> NodeId {
    NodeId {
        name: name.to_owned(),
        incarnation,
    }
}

fn rows(owners: &[Option<NodeId>]) -> Vec<ShardRow> {
    owners
        .iter()
        .enumerate()
        .map(|(i, owner)| ShardRow {
            id: u16::try_from(i).unwrap(),
            owner: owner.clone(),
            handover: None,
        })
        .collect()
}

/// Applies `steps` as the coordinator's compare-and-sets would; returns the shards whose owner
/// changed.
fn apply(rows: &mut [ShardRow], live: &[NodeId], steps: &[Step]) -> Vec<u16> {
    let mut moved = Vec::new();
    for step in steps {
        match step {
            Step::Assign { shard, to } => {
                assert!(live.contains(to), "assigned to a node that is not live");
                let row = &mut rows[usize::from(*shard)];
                row.owner = Some(to.clone());
                row.handover = None;
                moved.push(*shard);
            }
            Step::Mark { shard, to } => {
                assert!(live.iter().any(|n| &n.name == to), "marked for a dead node");
                rows[usize::from(*shard)].handover = Some((to.clone(), false));
            }
            Step::Unmark { shard } => rows[usize::from(*shard)].handover = None,
        }
    }
    moved
}

/// Every owner hands over what is marked (as a cooperating owner does between rounds).
fn hand_over(rows: &mut [ShardRow], live: &[NodeId]) -> Vec<u16> {
    let mut moved = Vec::new();
    for row in rows.iter_mut() {
        if let Some((to, _)) = row.handover.take() {
            row.owner = live.iter().find(|n| n.name == to).cloned();
            moved.push(row.id);
        }
    }
    moved
}

fn counts(rows: &[ShardRow], live: &[NodeId]) -> BTreeMap<String, usize> {
    let mut c: BTreeMap<String, usize> = live.iter().map(|n| (n.name.clone(), 0)).collect();
    for row in rows {
        if let Some(o) = &row.owner
            && live.contains(o)
        {
            *c.entry(o.name.clone()).or_default() += 1;
        }
    }
    c
}

#[test]
fn a_first_node_takes_every_shard() {
    let a = node("a", 1);
    let steps = plan(&rows(&[None, None, None]), std::slice::from_ref(&a), 8);
    assert_eq!(
        steps,
        (0..3)
            .map(|shard| Step::Assign {
                shard,
                to: a.clone()
            })
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_joining_node_is_handed_a_share_by_plan_not_by_force() {
    let (a, b) = (node("a", 1), node("b", 1));
    let owners = vec![Some(a.clone()); 4];
    let steps = plan(&rows(&owners), &[a, b], 8);
    // The highest ids leave first; nothing is taken from a live owner at once.
    assert_eq!(
        steps,
        vec![
            Step::Mark {
                shard: 3,
                to: "b".into()
            },
            Step::Mark {
                shard: 2,
                to: "b".into()
            },
        ]
    );
}

#[test]
fn a_planned_handover_is_forced_once_due_and_kept_until_then() {
    let (a, b) = (node("a", 1), node("b", 1));
    let mut shards = rows(&[Some(a.clone()), Some(a.clone())]);
    shards[1].handover = Some(("b".into(), false));
    let live = [a, b.clone()];
    assert_eq!(plan(&shards, &live, 8), vec![]);
    shards[1].handover = Some(("b".into(), true));
    assert_eq!(
        plan(&shards, &live, 8),
        vec![Step::Assign { shard: 1, to: b }]
    );
}

#[test]
fn a_lapsed_incarnation_loses_its_shards_even_if_its_name_is_back() {
    let (a, old_b, new_b) = (node("a", 1), node("b", 1), node("b", 2));
    let shards = rows(&[Some(a.clone()), Some(old_b.clone()), Some(old_b)]);
    let steps = plan(&shards, &[a, new_b.clone()], 8);
    // a keeps its shard and gets the extra one, b's new incarnation is owed one; ties go to
    // the first name.
    assert_eq!(
        steps,
        vec![
            Step::Assign {
                shard: 1,
                to: node("a", 1)
            },
            Step::Assign {
                shard: 2,
                to: new_b
            },
        ]
    );
}

#[test]
fn a_handover_to_a_node_that_left_is_dropped() {
    let a = node("a", 1);
    let mut shards = rows(&[Some(a.clone()), Some(a.clone())]);
    shards[0].handover = Some(("gone".into(), false));
    assert_eq!(plan(&shards, &[a], 8), vec![Step::Unmark { shard: 0 }]);
}

#[test]
fn no_live_node_means_no_steps() {
    assert_eq!(plan(&rows(&[None, Some(node("a", 1))]), &[], 8), vec![]);
}

#[test]
fn handovers_planned_at_once_are_bounded() {
    let (a, b) = (node("a", 1), node("b", 1));
    let owners = vec![Some(a.clone()); 40];
    let steps = plan(&rows(&owners), &[a, b], 5);
    assert_eq!(steps.len(), 5);
    assert!(steps.iter().all(|s| matches!(s, Step::Mark { .. })));
}

fn arb_case() -> impl Strategy<Value = (Vec<ShardRow>, Vec<NodeId>, usize)> {
    (1usize..48, 1usize..6, 1usize..12).prop_flat_map(|(shards, nodes, max_marked)| {
        let live: Vec<NodeId> = (0..nodes).map(|i| node(&format!("n{i}"), 2)).collect();
        // Owners: nobody, a live node, or a lapsed incarnation (of a live name or a gone one).
        let owner = (0usize..nodes + 3).prop_map(move |k| match k {
            0 => None,
            k if k <= nodes => Some(node(&format!("n{}", k - 1), 2)),
            k if k == nodes + 1 => Some(node("n0", 1)),
            _ => Some(node("gone", 7)),
        });
        let handover = prop::option::of((0usize..nodes + 1, any::<bool>()).prop_map(
            move |(k, due)| {
                let to = if k < nodes {
                    format!("n{k}")
                } else {
                    "gone".to_owned()
                };
                (to, due)
            },
        ));
        (
            prop::collection::vec((owner, handover), shards),
            Just(live),
            Just(max_marked),
        )
            .prop_map(|(cells, live, max_marked)| {
                let rows = cells
                    .into_iter()
                    .enumerate()
                    .map(|(i, (owner, handover))| ShardRow {
                        id: u16::try_from(i).unwrap(),
                        owner,
                        handover,
                    })
                    .collect();
                (rows, live, max_marked)
            })
    })
}

proptest! {
    /// Rounds of plan, apply and cooperative handover converge to an even spread over the live
    /// nodes that the next plan leaves alone, and a shard a live node held moves at most once,
    /// only from a node over its share.
    #[test]
    fn rounds_converge_to_an_even_spread_moving_only_the_surplus(
        (mut shards, live, max_marked) in arb_case()
    ) {
        let base = shards.len() / live.len();
        let held_at_start = counts(&shards, &live);
        let live_owned: BTreeMap<u16, String> = shards
            .iter()
            .filter_map(|r| r.owner.as_ref().filter(|o| live.contains(o)).map(|o| (r.id, o.name.clone())))
            .collect();
        let mut moves: BTreeMap<u16, usize> = BTreeMap::new();
        let mut stable = false;
        for _ in 0..shards.len() + 4 {
            let steps = plan(&shards, &live, max_marked);
            if steps.is_empty() && shards.iter().all(|r| r.handover.is_none()) {
                stable = true;
                break;
            }
            for id in apply(&mut shards, &live, &steps) {
                *moves.entry(id).or_default() += 1;
            }
            for id in hand_over(&mut shards, &live) {
                *moves.entry(id).or_default() += 1;
            }
        }
        prop_assert!(stable, "no fixed point: {shards:?}");
        prop_assert!(shards.iter().all(|r| r.owner.as_ref().is_some_and(|o| live.contains(o))));
        let c = counts(&shards, &live);
        let (lo, hi) = (c.values().min().copied().unwrap(), c.values().max().copied().unwrap());
        prop_assert!(hi - lo <= 1, "uneven: {c:?}");
        let mut moved_from: BTreeMap<&str, usize> = BTreeMap::new();
        for (id, from) in &live_owned {
            let n = moves.get(id).copied().unwrap_or(0);
            prop_assert!(n <= 1, "shard {id} of a live node moved {n} times");
            if n == 1 {
                *moved_from.entry(from.as_str()).or_default() += 1;
            }
        }
        for (name, n) in moved_from {
            let surplus = held_at_start[name].saturating_sub(base);
            prop_assert!(n <= surplus, "{name} gave {n}, over its surplus {surplus}");
        }
    }
}
