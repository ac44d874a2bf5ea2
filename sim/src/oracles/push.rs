//! The `push` oracle: the relay delivers its pushes for real to the stand-ins of
//! [`crate::pushworld`], and every push must be zero-knowledge, rate-limited, never sent to a
//! target that is gone, and sent to every offline user a message waits for
//! ([`check_push`] over [`PushFacts`]; the run builds the facts, unit tests build them by
//! hand).

use std::collections::BTreeMap;

use super::Input;
use super::ack_times;
use super::observed::Observed;
use crate::bounds::{PUSH, RELAY};
use crate::faults::FaultAction;
use crate::pushworld::{SeenPush, zero_knowledge};
use crate::violation::{Oracle, Violation};

/// The oracle's name.
const O: Oracle = Oracle::Push;

/// Slack of the push timing checks: a push leaves the relay right after the message's
/// commit and reaches the stand-in a link latency later.
pub const PUSH_SLACK_MS: u64 = 3_000;

/// What the `push` oracle reads, in simulated ms (the runner builds it from a run; unit tests
/// build it by hand).
#[derive(Debug, Clone, Default)]
pub struct PushFacts {
    /// Every push the stand-ins received, by arrival.
    pub pushes: Vec<SeenPush>,
    /// Registered targets of each client.
    pub targets: BTreeMap<usize, Vec<String>>,
    /// Offline spells of push clients: `(client, from, to)`.
    pub offline: Vec<(usize, u64, u64)>,
    /// Ack times of the messages to each client.
    pub acked_for: BTreeMap<usize, Vec<(u64, String)>>,
    /// When the relay's memory of recent pushes may have been lost or its clock moved (crash,
    /// store fault, stall, clock jump) or pushes may have been retried or delayed (faults on
    /// the push host's links, latency spikes).
    pub trouble_ms: Vec<u64>,
    /// Per client: when faults hit its host's links (the relay may think it online).
    pub link_trouble_ms: BTreeMap<usize, Vec<u64>>,
    /// Strings no push may carry: aliases, account and conversation ids, message canaries.
    pub secrets: Vec<String>,
    /// The relay's idle timeout: a client whose link was faulty this long before a spell may
    /// still be online to the relay (no FIN through a partition).
    pub idle_ms: u64,
    /// Per target: the spans in which the relay's committed rows no longer held it (from the
    /// commit that dropped it to the commit that added it back, or `u64::MAX`). A push in
    /// such a span is never excused by trouble: the deletion was durable.
    pub dropped_ms: BTreeMap<String, Vec<(u64, u64)>>,
    /// When a clock jumped (the relay's, or every clock of a `days` run): a push signed
    /// before it and checked by its service after it carries credentials dated on the other
    /// side of the jump.
    pub clock_jumps_ms: Vec<u64>,
}

/// How long after a clock jump a push service's refusal may be of a push signed before it
/// (the relay's push worker, the network's latency and the service's checks in between).
pub const SIGNED_BEFORE_JUMP_MS: u64 = 10_000;

/// The `push` oracle over [`PushFacts`]:
///
/// 1. **zero knowledge**: every push reaches a registered target, is accepted by its stand-in
///    (Web Push body decrypts, VAPID JWT verifies against the served key; FCM OAuth; APNs
///    provider token; unless a clock jumped less than [`SIGNED_BEFORE_JUMP_MS`] before, so
///    that it was signed on the other side of the jump), carries exactly `{"type":"new_msg"}`
///    ([`zero_knowledge`]) and none of
///    the run's aliases, ids or message texts;
/// 2. **one per window**: two pushes to one target at least `PUSH_MIN_INTERVAL_MS` (30 s,
///    less [`PUSH_SLACK_MS`]) apart, unless trouble came between;
/// 3. **gone is gone**: after a target's push service answered 404/410 (`UNREGISTERED`), no
///    push reaches it later than [`PUSH_SLACK_MS`] unless the relay crashed or its store
///    failed meanwhile and the deletion was not committed: once a commit dropped the target
///    (see [`PushFacts::dropped_ms`]), no crash excuses a push to it;
/// 4. **offline users are woken**: a client offline with a target while a message is acked
///    for it (at least 1 s into the spell, 5 s before its end) gets a push between 30 s before
///    that message (a push in the window covers it) and the end of the spell.
pub fn check_push(facts: &PushFacts, out: &mut Vec<Violation>) {
    let owner: BTreeMap<&str, usize> = facts
        .targets
        .iter()
        .flat_map(|(c, ts)| ts.iter().map(move |t| (t.as_str(), *c)))
        .collect();
    let mut by_target: BTreeMap<&str, Vec<&SeenPush>> = BTreeMap::new();
    for p in &facts.pushes {
        let Some(&c) = owner.get(p.target.as_str()) else {
            out.push(Violation::new(
                O,
                format!(
                    "a {:?} push at {} ms went to a target no client registered",
                    p.kind, p.at_ms
                ),
            ));
            continue;
        };
        by_target.entry(p.target.as_str()).or_default().push(p);
        zero_knowledge_push(facts, c, p, out);
    }
    for (target, pushes) in &by_target {
        once_per_window_and_gone(facts, owner[target], pushes, out);
    }
    for &spell in &facts.offline {
        offline_woken(facts, &by_target, spell, out);
    }
}

/// The relay's minimum interval between two pushes to one target.
const INTERVAL_MS: u64 = relay_core::limits::PUSH_MIN_INTERVAL_MS;

/// Whether a time of `list` falls in `from..=to`.
fn troubled(from: u64, to: u64, list: &[u64]) -> bool {
    list.iter().any(|t| *t >= from && *t <= to)
}

/// Rule 1: push `p` to client `c`'s target was accepted by its service, is exactly the
/// zero-knowledge payload, and carries no secret of the run.
fn zero_knowledge_push(facts: &PushFacts, c: usize, p: &SeenPush, out: &mut Vec<Violation>) {
    let payload = match &p.payload {
        Ok(payload) => payload,
        Err(_)
            if troubled(
                p.at_ms.saturating_sub(SIGNED_BEFORE_JUMP_MS),
                p.at_ms,
                &facts.clock_jumps_ms,
            ) =>
        {
            return;
        }
        Err(why) => {
            out.push(Violation::new(
                O,
                format!(
                    "c{c}'s {:?} push at {} ms was refused by its push service ({}): {why}",
                    p.kind, p.at_ms, p.status
                ),
            ));
            return;
        }
    };
    if let Err(why) = zero_knowledge(p.kind, payload) {
        out.push(Violation::new(
            O,
            format!("c{c}'s {:?} push at {} ms: {why}", p.kind, p.at_ms),
        ));
    }
    if let Some(found) = facts.secrets.iter().find(|s| contains_word(payload, s)) {
        out.push(Violation::new(
            O,
            format!(
                "c{c}'s {:?} push at {} ms carries an alias, id or message text of the run ({found:?} in {payload})",
                p.kind, p.at_ms
            ),
        ));
    }
}

/// Rules 2 and 3 over the pushes to one target of client `c`, in arrival order.
fn once_per_window_and_gone(
    facts: &PushFacts,
    c: usize,
    pushes: &[&SeenPush],
    out: &mut Vec<Violation>,
) {
    for w in pushes.windows(2) {
        let (a, b) = (w[0], w[1]);
        if b.at_ms < a.at_ms + INTERVAL_MS.saturating_sub(PUSH_SLACK_MS)
            && !troubled(
                a.at_ms.saturating_sub(INTERVAL_MS),
                b.at_ms,
                &facts.trouble_ms,
            )
        {
            out.push(Violation::new(
                O,
                format!(
                    "c{c}'s {:?} target was pushed at {} and {} ms: more than one push per {INTERVAL_MS} ms window",
                    a.kind, a.at_ms, b.at_ms
                ),
            ));
        }
    }
    let Some(gone) = pushes.iter().find(|p| p.gone) else {
        return;
    };
    let dropped = facts.dropped_ms.get(gone.target.as_str());
    // A push while the committed rows no longer held the target: the deletion was durable,
    // so no crash or store fault excuses it.
    let after_durable_drop = pushes.iter().find_map(|p| {
        dropped?
            .iter()
            .find(|(from, to)| p.at_ms > from + PUSH_SLACK_MS && p.at_ms < *to)
            .map(|(from, _)| (p, *from))
    });
    if let Some((later, from)) = after_durable_drop {
        out.push(Violation::new(
            O,
            format!(
                "c{c}'s {:?} target answered {} at {} ms (gone), its deletion was committed at {from} ms, and it was pushed again at {} ms",
                gone.kind, gone.status, gone.at_ms, later.at_ms
            ),
        ));
    } else if let Some(later) = pushes.iter().find(|p| p.at_ms > gone.at_ms + PUSH_SLACK_MS)
        && !troubled(gone.at_ms, later.at_ms, &facts.trouble_ms)
    {
        out.push(Violation::new(
            O,
            format!(
                "c{c}'s {:?} target answered {} at {} ms (gone) and was pushed again at {} ms",
                gone.kind, gone.status, gone.at_ms, later.at_ms
            ),
        ));
    }
}

/// [`PushFacts::dropped_ms`] from the committed push-targets rows: for each target, the spans
/// in which its owner's committed row (the latest write of the account's key) no longer
/// held it, after a row that did.
pub fn dropped_spans(
    targets: &BTreeMap<usize, Vec<String>>,
    uuids: &BTreeMap<usize, String>,
    writes: &[(u64, String, String)],
) -> BTreeMap<String, Vec<(u64, u64)>> {
    let mut out: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    for (c, ts) in targets {
        let Some(uuid) = uuids.get(c) else { continue };
        for t in ts {
            let mut held = false;
            let mut spans: Vec<(u64, u64)> = Vec::new();
            for (at, _, row) in writes.iter().filter(|(_, k, _)| k == uuid) {
                let now_held = row.contains(t.as_str());
                if held && !now_held {
                    spans.push((*at, u64::MAX));
                } else if !held
                    && now_held
                    && let Some(last) = spans.last_mut()
                {
                    last.1 = *at;
                }
                held = now_held;
            }
            if !spans.is_empty() {
                out.insert(t.clone(), spans);
            }
        }
    }
    out
}

/// Rule 4 over one offline spell `(client, from, to)`.
fn offline_woken(
    facts: &PushFacts,
    by_target: &BTreeMap<&str, Vec<&SeenPush>>,
    (c, from, to): (usize, u64, u64),
    out: &mut Vec<Violation>,
) {
    let Some(targets) = facts.targets.get(&c) else {
        return;
    };
    // Every target gone before the spell: nothing left to push to.
    let live = targets.iter().any(|t| {
        by_target
            .get(t.as_str())
            .is_none_or(|ps| !ps.iter().any(|p| p.gone && p.at_ms < to))
    });
    if !live
        || troubled(from.saturating_sub(INTERVAL_MS), to, &facts.trouble_ms)
        || facts
            .link_trouble_ms
            .get(&c)
            .is_some_and(|l| troubled(from.saturating_sub(facts.idle_ms), to, l))
    {
        return;
    }
    let pushed_between = |lo: u64, hi: u64| {
        targets.iter().any(|t| {
            by_target
                .get(t.as_str())
                .is_some_and(|ps| ps.iter().any(|p| p.at_ms >= lo && p.at_ms <= hi))
        })
    };
    let missed = facts.acked_for.get(&c).and_then(|acks| {
        acks.iter().find(|(t, _)| {
            *t >= from + 1_000
                && *t + 5_000 <= to
                && !pushed_between(
                    t.saturating_sub(INTERVAL_MS + PUSH_SLACK_MS),
                    to + PUSH_SLACK_MS,
                )
        })
    });
    if let Some((t, id)) = missed {
        out.push(Violation::new(
            O,
            format!(
                "c{c} was offline {from}..{to} ms with a push target while {id} was acked for it at {t} ms, and was never pushed"
            ),
        ));
    }
}

/// The `push` oracle over a run: builds its [`PushFacts`].
pub(super) fn push(input: &Input<'_>, h: &Observed<'_>, out: &mut Vec<Violation>) {
    let acks = ack_times(input.records);
    let mut acked_for: BTreeMap<usize, Vec<(u64, String)>> = BTreeMap::new();
    for a in h.live_acks() {
        if let Some(to) = h.recipient(a)
            && let Some(&t) = acks.get(a.id.as_str())
        {
            acked_for.entry(to).or_default().push((t, a.id.clone()));
        }
    }
    let mut secrets: Vec<String> = input.aliases.values().flatten().cloned().collect();
    secrets.extend(input.world.uuids.values().cloned());
    secrets.extend(input.convs.values().cloned());
    secrets.extend(input.scenario.canaries());
    let facts = PushFacts {
        // The drills' own targets are theirs to judge (`push-off`).
        pushes: input
            .pushes
            .iter()
            .filter(|p| !input.world.drill_push_targets.contains(&p.target))
            .cloned()
            .collect(),
        targets: input.world.push_targets.clone(),
        offline: input.world.offline.clone(),
        acked_for,
        trouble_ms: trouble_ms(input),
        link_trouble_ms: link_trouble_ms(input),
        secrets,
        idle_ms: relay_core::Config::default().idle_timeout_ms,
        dropped_ms: dropped_spans(
            &input.world.push_targets,
            &input.world.uuids,
            &input.history.push_targets,
        ),
        clock_jumps_ms: clock_jumps_ms(input),
    };
    check_push(&facts, out);
}

/// When the relay's memory of recent pushes may have been lost or its clock moved, or
/// pushes delayed: relay crashes and power-offs, store faults, stalls, clock jumps (the final
/// one too), latency spikes, faults on the push host's links.
fn trouble_ms(input: &Input<'_>) -> Vec<u64> {
    let start = input.start_ms.unwrap_or(0);
    let mut trouble_ms: Vec<u64> = input
        .plan
        .events
        .iter()
        .filter(|e| {
            matches!(
                &e.action,
                FaultAction::Crash { host } if host == RELAY
            ) || (e.action.is_store_fault() && !matches!(e.action, FaultAction::FailReads { .. }))
                || matches!(e.action, FaultAction::MaxLatency { .. })
                || e.action.hosts().contains(&PUSH)
        })
        .map(|e| start + e.at_ms)
        .collect();
    trouble_ms.extend(input.world.relay_off_ms.iter().copied());
    trouble_ms.extend(clock_jumps_ms(input));
    trouble_ms
}

/// When a clock jumped: the plan's jumps (the relay's, the world's), a drill's, the final one.
fn clock_jumps_ms(input: &Input<'_>) -> Vec<u64> {
    let start = input.start_ms.unwrap_or(0);
    let mut out: Vec<u64> = input
        .plan
        .events
        .iter()
        .filter(|e| {
            matches!(
                e.action,
                FaultAction::ClockJump { .. } | FaultAction::WorldJump { .. }
            )
        })
        .map(|e| start + e.at_ms)
        .collect();
    out.extend(input.world.relay_jumps.iter().map(|(at, _)| *at));
    out.extend(input.world.final_jump_ms);
    out
}

/// Per push client: when faults hit its host's links.
fn link_trouble_ms(input: &Input<'_>) -> BTreeMap<usize, Vec<u64>> {
    let start = input.start_ms.unwrap_or(0);
    input
        .world
        .push_targets
        .keys()
        .map(|&c| {
            let host = input.scenario.accounts[c].host.as_str();
            let times = input
                .plan
                .events
                .iter()
                .filter(|e| e.action.hosts().contains(&host))
                .map(|e| start + e.at_ms)
                .collect();
            (c, times)
        })
        .collect()
}

/// Whether `needle` occurs in `hay` as a whole word: not inside a longer run of letters and
/// digits (a vanity alias `400` is not leaked by a TTL of `86400s`).
fn contains_word(hay: &str, needle: &str) -> bool {
    if needle.is_empty() {
        return false;
    }
    let word = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
    hay.match_indices(needle).any(|(i, _)| {
        !word(hay[..i].chars().next_back()) && !word(hay[i + needle.len()..].chars().next())
    })
}

#[cfg(test)]
mod tests {
    //! The `push` oracle on hand-built facts: each rule fires on the defect it guards against,
    //! and stays quiet on a clean history.

    use super::{
        PushFacts, SIGNED_BEFORE_JUMP_MS, Violation, check_push, contains_word, dropped_spans,
    };
    use crate::pushworld::{PushKind, SeenPush};

    /// Seed 20 at the medium scale: the vanity alias `400` "found" in an FCM TTL of `86400s`.
    #[test]
    fn a_secret_is_matched_as_a_whole_word_only() {
        let fcm = r#"{"token":"simfcm-c1","data":{"type":"new_msg"},"android":{"ttl":"86400s"}}"#;
        assert!(!contains_word(fcm, "400"));
        assert!(contains_word(r#"{"from":"400"}"#, "400"));
        assert!(contains_word("alias-4444 x", "alias-4444"));
        assert!(!contains_word("x", ""));
    }

    const NEW_MSG: &str = r#"{"type":"new_msg"}"#;

    fn web(target: &str, at_ms: u64, status: u16, payload: &str) -> SeenPush {
        SeenPush {
            kind: PushKind::Web,
            target: target.to_owned(),
            at_ms,
            status,
            gone: matches!(status, 404 | 410),
            payload: Ok(payload.to_owned()),
        }
    }

    /// c0 (two subscriptions `s1`, `s2`) offline 10..100 s; a message acked for it at 20 s.
    fn facts(pushes: Vec<SeenPush>) -> PushFacts {
        PushFacts {
            pushes,
            targets: [(0, vec!["s1".to_owned(), "s2".to_owned()])].into(),
            offline: vec![(0, 10_000, 100_000)],
            acked_for: [(0, vec![(20_000, "m1".to_owned())])].into(),
            secrets: vec!["alias-4444".to_owned(), "c-conv1".to_owned()],
            idle_ms: 90_000,
            ..PushFacts::default()
        }
    }

    fn check(f: &PushFacts) -> Vec<Violation> {
        let mut out = Vec::new();
        check_push(f, &mut out);
        out
    }

    #[test]
    fn a_clean_history_passes() {
        let f = facts(vec![
            web("s1", 20_010, 201, NEW_MSG),
            web("s2", 20_012, 201, NEW_MSG),
            web("s1", 60_000, 201, NEW_MSG),
        ]);
        assert_eq!(check(&f), Vec::new());
    }

    #[test]
    fn an_offline_recipient_never_pushed_is_caught() {
        let v = check(&facts(Vec::new()));
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].detail.contains("never pushed"), "{v:?}");
    }

    #[test]
    fn content_in_a_push_is_caught() {
        for payload in [
            r#"{"type":"new_msg","from":"x"}"#,
            r#"{"type":"new_msg"} "#,
            r#"{"type":"alias-4444"}"#,
        ] {
            let v = check(&facts(vec![web("s1", 20_010, 201, payload)]));
            assert!(!v.is_empty(), "{payload}: not caught");
            assert!(v.iter().all(|v| v.oracle == crate::violation::Oracle::Push));
        }
        // Secrets anywhere in a native payload.
        let mut apns = web("s2", 20_010, 200, "");
        apns.kind = PushKind::Apns;
        apns.payload = Ok(r#"{"aps":{"alert":{"body":"c-conv1"}},"type":"new_msg"}"#.to_owned());
        let v = check(&facts(vec![apns]));
        assert!(v.iter().any(|v| v.detail.contains("carries")), "{v:?}");
    }

    #[test]
    fn a_push_the_service_refused_is_caught() {
        let mut bad = web("s1", 20_010, 401, NEW_MSG);
        bad.payload = Err("VAPID: bad signature".to_owned());
        let v = check(&facts(vec![bad.clone()]));
        assert!(v.iter().any(|v| v.detail.contains("refused")), "{v:?}");
        // Signed before a clock jump, checked after it: its credentials are dated on the
        // other side of the jump, not wrong.
        let jumped = PushFacts {
            clock_jumps_ms: vec![20_000],
            ..facts(vec![bad.clone()])
        };
        assert_eq!(check(&jumped), Vec::new());
        let long_after = PushFacts {
            clock_jumps_ms: vec![20_010 - SIGNED_BEFORE_JUMP_MS - 1],
            ..facts(vec![bad])
        };
        assert!(!check(&long_after).is_empty());
    }

    #[test]
    fn two_pushes_in_one_window_are_caught_unless_excused() {
        let pushes = vec![
            web("s1", 20_010, 201, NEW_MSG),
            web("s1", 30_000, 201, NEW_MSG),
        ];
        let v = check(&facts(pushes.clone()));
        assert!(v.iter().any(|v| v.detail.contains("window")), "{v:?}");
        let excused = PushFacts {
            trouble_ms: vec![25_000],
            ..facts(pushes)
        };
        assert_eq!(check(&excused), Vec::new(), "a relay restart between");
    }

    /// A crash between "gone" and the next push excuses it only while the deletion may not
    /// have been committed: once a commit dropped the target, nothing does.
    #[test]
    fn a_crash_excuses_a_push_after_gone_only_until_the_deletion_is_committed() {
        let pushes = vec![
            web("s1", 20_010, 201, NEW_MSG),
            web("s2", 20_012, 410, NEW_MSG),
            web("s1", 60_000, 201, NEW_MSG),
            web("s2", 60_002, 201, NEW_MSG),
        ];
        let crashed = PushFacts {
            trouble_ms: vec![40_000],
            ..facts(pushes)
        };
        assert_eq!(check(&crashed), Vec::new(), "not committed: excused");
        let uuids = [(0, "u0".to_owned())].into();
        let writes = vec![
            (
                1_000,
                "u0".to_owned(),
                r#"[{"endpoint":"s1"},{"endpoint":"s2"}]"#.to_owned(),
            ),
            (20_500, "u0".to_owned(), r#"[{"endpoint":"s1"}]"#.to_owned()),
        ];
        let dropped = dropped_spans(&crashed.targets, &uuids, &writes);
        assert_eq!(
            dropped.get("s2"),
            Some(&vec![(20_500, u64::MAX)]),
            "{dropped:?}"
        );
        assert_eq!(dropped.get("s1"), None);
        let durable = PushFacts {
            dropped_ms: dropped,
            ..crashed.clone()
        };
        let v = check(&durable);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].detail.contains("deletion was committed at 20500 ms"),
            "{v:?}"
        );
        // Subscribed again (a commit adds it back) before the push: allowed.
        let mut again = writes;
        again.push((
            50_000,
            "u0".to_owned(),
            r#"[{"endpoint":"s1"},{"endpoint":"s2"}]"#.to_owned(),
        ));
        let back = PushFacts {
            dropped_ms: dropped_spans(&crashed.targets, &uuids, &again),
            ..crashed
        };
        assert_eq!(check(&back), Vec::new());
    }

    #[test]
    fn a_push_after_gone_is_caught() {
        let v = check(&facts(vec![
            web("s1", 20_010, 201, NEW_MSG),
            web("s2", 20_012, 410, NEW_MSG),
            web("s1", 60_000, 201, NEW_MSG),
            web("s2", 60_002, 410, NEW_MSG),
        ]));
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].detail.contains("gone"), "{v:?}");
    }

    #[test]
    fn a_push_to_an_unregistered_target_is_caught() {
        let v = check(&facts(vec![
            web("s1", 20_010, 201, NEW_MSG),
            web("s9", 20_012, 404, NEW_MSG),
        ]));
        assert!(
            v.iter().any(|v| v.detail.contains("no client registered")),
            "{v:?}"
        );
    }
}
