//! How full the queues of other shards' users are, as a conversation's owner shard sees them:
//! what it needs to keep the queue bounds for messages whose recipients are elsewhere.
//!
//! * **The recipient's shard reports.** Each acknowledgement of applied hand-offs
//!   ([`super::Applied::level`]) carries the stream's level and its recipient's whole backlog
//!   as they were after the apply; when a stream another shard owns falls (delivered,
//!   expired, retracted) its level goes to that owner ([`Levels`]); and it answers a question
//!   ([`LevelsAsked`]) with the levels asked for, or with every stream the asker owns.
//! * **The owner adds what it handed and was not acknowledged** ([`Tally`]): a report measured
//!   after an apply is taken together with the outbox rows the same acknowledgement deletes, so
//!   the sum never counts less than the recipient's shard holds. A fall not reported yet (or
//!   lost) makes the view too high, never too low: a view that says full and is older than
//!   [`LEVELS_STALE_MS`] is asked for again while the message is refused (`QUEUE_FULL` is
//!   "retry later"), so a lost report never blocks a stream for long.
//! * **After a start** the owner knows nothing of other shards' queues: it asks every shard
//!   for the streams it owns ([`LevelsAsked::stream`] `None`) every [`super::RESEND_MS`] until
//!   each answered ([`Levels::complete`]); until then a message that needs a view is refused
//!   `STORAGE_UNAVAILABLE` ("send it again").
//!
//! * **A late report changes nothing.** Each level carries the [`Stamp`] of its measurement
//!   (the recipient shard's incarnation and a count of its measurements), so that a report or
//!   an acknowledgement that a transport delayed past a later one is not taken over the later
//!   one. Only a view that holds something keeps its stamp: a late report that finds none
//!   makes the view too high, never too low.
//!
//! A conversation has one owner, so its bound holds exactly. A recipient's backlog and a
//! sender's bytes are shared by the owners of their conversations: each owner counts what the
//! reports say plus what it handed itself, so owners deciding for one recipient (or sender) at
//! the same moment may together pass its bound by what the others had in flight. The
//! relay's total is split: each shard decides at most its share ([`total_share`]), counted
//! over what it stores and what it handed, which holds the total exactly.

use std::collections::{BTreeMap, BTreeSet};

use wire::{UnixMs, UserUuid};

use super::{ShardId, Stream};

/// How old a view that says "full" may be before the owner asks for it again.
pub const LEVELS_STALE_MS: u64 = 1_000;

/// A count of queued messages and their bytes (as `crate::limits` counts them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Fill {
    /// Messages.
    pub msgs: u64,
    /// Bytes.
    pub bytes: u64,
}

impl Fill {
    /// `self` and `other` together.
    pub fn plus(self, other: Self) -> Self {
        Self {
            msgs: self.msgs + other.msgs,
            bytes: self.bytes + other.bytes,
        }
    }

    fn minus(self, other: Self) -> Self {
        Self {
            msgs: self.msgs.saturating_sub(other.msgs),
            bytes: self.bytes.saturating_sub(other.bytes),
        }
    }

    fn is_empty(self) -> bool {
        self.msgs == 0 && self.bytes == 0
    }
}

/// When a recipient's shard measured a level: its incarnation (its boot count), then the
/// count of its measurements in that incarnation. A later measurement has a greater stamp.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct Stamp {
    /// The measuring shard's boot count.
    pub boot: u64,
    /// Its measurements in that boot, this one included.
    pub n: u64,
}

/// What a recipient's shard holds of one stream, and of its recipient's whole backlog.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Level {
    /// The stream's queue.
    pub stream: Fill,
    /// Everything queued for the recipient, from every conversation.
    pub recipient: Fill,
    /// When it was measured.
    pub stamp: Stamp,
}

/// A question to a recipient's shard, answered with a [`Levels`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LevelsAsked {
    /// The owner that asks.
    pub from: ShardId,
    /// The recipients' shard.
    pub to: ShardId,
    /// One stream; `None`: every stream of `to`'s users that `from` owns (after a start).
    pub stream: Option<Stream>,
}

/// Levels a recipient's shard reports to an owner: after a fall, or as an answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Levels {
    /// The recipients' shard.
    pub from: ShardId,
    /// The owner.
    pub to: ShardId,
    /// Each stream, with the author of what it holds (`None` when it is empty).
    pub streams: Vec<(Stream, Option<UserUuid>, Level)>,
    /// Whether these are all the streams `from` holds for `to` (the answer to a question
    /// about them all): any other is empty.
    pub complete: bool,
    /// When they were measured (a complete report's streams it does not list were empty
    /// then).
    pub stamp: Stamp,
}

/// The part of the relay's total of queued bytes one of `shards` shards may decide.
pub fn total_share(total: u64, shards: u16) -> u64 {
    total / u64::from(shards.max(1))
}

/// Fills counted per stream, per recipient, per author and in all: what an owner handed and
/// was not acknowledged.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    by_stream: BTreeMap<Stream, Fill>,
    by_recipient: BTreeMap<UserUuid, Fill>,
    by_author: BTreeMap<UserUuid, Fill>,
    total: Fill,
}

impl Tally {
    /// One more message of `author` in `stream`.
    pub fn add(&mut self, stream: &Stream, author: &UserUuid, fill: Fill) {
        for (map, key) in [
            (&mut self.by_recipient, &stream.recipient),
            (&mut self.by_author, author),
        ] {
            let f = map.entry(key.clone()).or_default();
            *f = f.plus(fill);
        }
        let f = self.by_stream.entry(stream.clone()).or_default();
        *f = f.plus(fill);
        self.total = self.total.plus(fill);
    }

    /// One message fewer.
    pub fn sub(&mut self, stream: &Stream, author: &UserUuid, fill: Fill) {
        for (map, key) in [
            (&mut self.by_recipient, &stream.recipient),
            (&mut self.by_author, author),
        ] {
            take_from(map, key, fill);
        }
        take_from(&mut self.by_stream, stream, fill);
        self.total = self.total.minus(fill);
    }

    /// What `stream` holds.
    pub fn stream(&self, stream: &Stream) -> Fill {
        self.by_stream.get(stream).copied().unwrap_or_default()
    }

    /// What is held for `recipient`.
    pub fn recipient(&self, recipient: &UserUuid) -> Fill {
        self.by_recipient
            .get(recipient)
            .copied()
            .unwrap_or_default()
    }

    /// What is held of `author`'s.
    pub fn author(&self, author: &UserUuid) -> Fill {
        self.by_author.get(author).copied().unwrap_or_default()
    }

    /// Everything held.
    pub fn total(&self) -> Fill {
        self.total
    }
}

/// Takes `fill` off `key`'s entry; an entry that empties goes.
fn take_from<K: Ord>(map: &mut BTreeMap<K, Fill>, key: &K, fill: Fill) {
    if let Some(f) = map.get_mut(key) {
        *f = f.minus(fill);
        if f.is_empty() {
            map.remove(key);
        }
    }
}

/// One stream's last report.
#[derive(Debug, Clone)]
struct View {
    author: Option<UserUuid>,
    stream: Fill,
    /// When it came.
    at: UnixMs,
    /// When it was measured.
    stamp: Stamp,
}

/// An owner's views of other shards' queues: each stream's last report, each recipient's
/// backlog as last reported, what the streams hold per author and in all, and which shards
/// answered the question asked after a start.
#[derive(Debug, Clone, Default)]
pub struct Views {
    streams: BTreeMap<Stream, View>,
    /// Each recipient's backlog: what, when it came, when it was measured.
    recipients: BTreeMap<UserUuid, (Fill, UnixMs, Stamp)>,
    by_author: BTreeMap<UserUuid, Fill>,
    total: Fill,
    /// Shards that reported every stream this owner has there since it started.
    synced: BTreeSet<ShardId>,
    /// When the question about them all last went out (`None`: not since the start).
    asked_all: Option<UnixMs>,
    /// When each stream was last asked for.
    asked: BTreeMap<Stream, UnixMs>,
}

impl Views {
    /// Takes stream `stream`'s report, received at `now`; what the views hold from a later
    /// measurement is kept.
    pub fn report(
        &mut self,
        stream: &Stream,
        author: Option<&UserUuid>,
        level: Level,
        now: UnixMs,
    ) {
        let recipient_later = self
            .recipients
            .get(&stream.recipient)
            .is_some_and(|r| r.2 > level.stamp);
        if !recipient_later {
            if level.recipient.is_empty() {
                self.recipients.remove(&stream.recipient);
            } else {
                self.recipients.insert(
                    stream.recipient.clone(),
                    (level.recipient, now, level.stamp),
                );
            }
        }
        if self
            .streams
            .get(stream)
            .is_some_and(|v| v.stamp > level.stamp)
        {
            return;
        }
        self.asked.remove(stream);
        let old = self.streams.remove(stream);
        let author = author
            .cloned()
            .or_else(|| old.as_ref().and_then(|v| v.author.clone()));
        if let Some(old) = old
            && let Some(a) = &old.author
        {
            take_from(&mut self.by_author, a, old.stream);
            self.total = self.total.minus(old.stream);
        }
        if level.stream.is_empty() {
            return;
        }
        if let Some(a) = &author {
            let f = self.by_author.entry(a.clone()).or_default();
            *f = f.plus(level.stream);
            self.total = self.total.plus(level.stream);
        }
        self.streams.insert(
            stream.clone(),
            View {
                author,
                stream: level.stream,
                at: now,
                stamp: level.stamp,
            },
        );
    }

    /// Takes a whole report of shard `from`: its streams not in it are empty.
    pub fn report_all(&mut self, levels: &Levels, now: UnixMs, of: impl Fn(&UserUuid) -> ShardId) {
        let listed: BTreeSet<&Stream> = levels.streams.iter().map(|(s, _, _)| s).collect();
        let gone: Vec<Stream> = self
            .streams
            .keys()
            .filter(|s| of(&s.recipient) == levels.from && !listed.contains(s))
            .cloned()
            .collect();
        let empty = Level {
            stamp: levels.stamp,
            ..Level::default()
        };
        for s in gone {
            self.report(&s, None, empty, now);
        }
        self.recipients.retain(|r, (_, _, stamp)| {
            of(r) != levels.from
                || *stamp > levels.stamp
                || levels.streams.iter().any(|(s, _, _)| s.recipient == *r)
        });
        for (s, author, level) in &levels.streams {
            self.report(s, author.as_ref(), *level, now);
        }
        self.synced.insert(levels.from);
    }

    /// What `stream` held when last reported.
    pub fn stream(&self, stream: &Stream) -> Fill {
        self.streams
            .get(stream)
            .map_or_else(Fill::default, |v| v.stream)
    }

    /// `recipient`'s backlog when last reported.
    pub fn recipient(&self, recipient: &UserUuid) -> Fill {
        self.recipients
            .get(recipient)
            .map_or_else(Fill::default, |r| r.0)
    }

    /// What the streams held of `author`'s when last reported.
    pub fn author(&self, author: &UserUuid) -> Fill {
        self.by_author.get(author).copied().unwrap_or_default()
    }

    /// What every stream held when last reported.
    pub fn total(&self) -> Fill {
        self.total
    }

    /// Whether the views of `stream` (and of its recipient) are older than
    /// [`LEVELS_STALE_MS`] at `now` and it was not asked for since: if so it is marked asked.
    pub fn ask_if_stale(&mut self, stream: &Stream, now: UnixMs) -> bool {
        let seen = [
            self.streams.get(stream).map(|v| v.at),
            self.recipients.get(&stream.recipient).map(|r| r.1),
            self.asked.get(stream).copied(),
        ]
        .into_iter()
        .flatten()
        .max();
        if seen.is_some_and(|seen| now.get() < seen.get() + LEVELS_STALE_MS) {
            return false;
        }
        self.asked.insert(stream.clone(), now);
        true
    }

    /// Whether shard `shard` answered the question about all its streams since the start.
    pub fn synced(&self, shard: ShardId) -> bool {
        self.synced.contains(&shard)
    }

    /// The shards of `shards` (but `me`) to ask about all their streams at `now`: those that
    /// did not answer yet, once every [`super::RESEND_MS`].
    pub fn to_ask(&mut self, me: ShardId, shards: u16, now: UnixMs) -> Vec<ShardId> {
        let due = self
            .asked_all
            .is_none_or(|at| now.get() >= at.get() + super::RESEND_MS);
        if !due {
            return Vec::new();
        }
        let ask: Vec<ShardId> = (0..shards)
            .map(ShardId)
            .filter(|s| *s != me && !self.synced.contains(s))
            .collect();
        if !ask.is_empty() {
            self.asked_all = Some(now);
        }
        ask
    }

    /// When the question about them all is next due (`None`: every shard answered).
    pub fn next_ask(&self, me: ShardId, shards: u16) -> Option<UnixMs> {
        let waiting = (0..shards).any(|s| ShardId(s) != me && !self.synced.contains(&ShardId(s)));
        waiting.then(|| {
            self.asked_all
                .map_or(UnixMs(0), |at| at.plus_ms(super::RESEND_MS))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(n: u8) -> UserUuid {
        UserUuid::parse(&format!("00000000-0000-4000-8000-0000000000{n:02x}")).unwrap()
    }

    fn stream(r: u8, conv: &str) -> Stream {
        Stream {
            recipient: user(r),
            conv: wire::ConvId::parse(conv).unwrap(),
        }
    }

    fn fill(msgs: u64, bytes: u64) -> Fill {
        Fill { msgs, bytes }
    }

    fn level(s: (u64, u64), r: (u64, u64)) -> Level {
        Level {
            stream: fill(s.0, s.1),
            recipient: fill(r.0, r.1),
            stamp: Stamp::default(),
        }
    }

    #[test]
    fn a_tally_counts_what_was_added_and_not_taken_off() {
        let mut t = Tally::default();
        let (s1, s2) = (stream(1, "c1"), stream(2, "c2"));
        t.add(&s1, &user(9), fill(1, 10));
        t.add(&s1, &user(9), fill(1, 20));
        t.add(&s2, &user(9), fill(1, 5));
        assert_eq!(t.stream(&s1), fill(2, 30));
        assert_eq!(t.recipient(&user(2)), fill(1, 5));
        assert_eq!(t.author(&user(9)), fill(3, 35));
        assert_eq!(t.total(), fill(3, 35));
        t.sub(&s1, &user(9), fill(1, 10));
        t.sub(&s1, &user(9), fill(1, 20));
        assert_eq!(t.stream(&s1), Fill::default());
        assert!(!t.by_stream.contains_key(&s1), "an emptied entry goes");
        assert_eq!(t.author(&user(9)), fill(1, 5));
        assert_eq!(t.total(), fill(1, 5));
    }

    #[test]
    fn a_report_replaces_the_last_and_keeps_the_sums_in_step() {
        let mut v = Views::default();
        let s = stream(1, "c1");
        v.report(&s, Some(&user(9)), level((3, 30), (5, 50)), UnixMs(10));
        v.report(
            &stream(1, "c2"),
            Some(&user(8)),
            level((2, 20), (5, 50)),
            UnixMs(11),
        );
        assert_eq!(v.stream(&s), fill(3, 30));
        assert_eq!(v.recipient(&user(1)), fill(5, 50));
        assert_eq!(v.total(), fill(5, 50));
        // A fall, reported without its author: the author it had is kept.
        v.report(&s, None, level((1, 10), (3, 30)), UnixMs(12));
        assert_eq!(v.author(&user(9)), fill(1, 10));
        assert_eq!(v.total(), fill(3, 30));
        v.report(&s, None, Level::default(), UnixMs(13));
        assert_eq!(v.author(&user(9)), Fill::default());
        assert_eq!(v.recipient(&user(1)), Fill::default());
        assert!(!v.streams.contains_key(&s));
    }

    #[test]
    fn a_whole_report_empties_what_it_does_not_list_of_its_shard_only() {
        let mut v = Views::default();
        // Users 1 and 2 on shard 1, user 3 on shard 2.
        let of = |u: &UserUuid| {
            if *u == user(3) {
                ShardId(2)
            } else {
                ShardId(1)
            }
        };
        v.report(
            &stream(1, "c1"),
            Some(&user(9)),
            level((3, 30), (3, 30)),
            UnixMs(1),
        );
        v.report(
            &stream(2, "c2"),
            Some(&user(9)),
            level((2, 20), (2, 20)),
            UnixMs(1),
        );
        v.report(
            &stream(3, "c3"),
            Some(&user(9)),
            level((1, 10), (1, 10)),
            UnixMs(1),
        );
        assert!(!v.synced(ShardId(1)));
        let all = Levels {
            from: ShardId(1),
            to: ShardId(0),
            streams: vec![(stream(2, "c2"), Some(user(9)), level((1, 10), (4, 40)))],
            complete: true,
            stamp: Stamp::default(),
        };
        v.report_all(&all, UnixMs(2), of);
        assert!(v.synced(ShardId(1)) && !v.synced(ShardId(2)));
        assert_eq!(v.stream(&stream(1, "c1")), Fill::default());
        assert_eq!(v.recipient(&user(1)), Fill::default());
        assert_eq!(v.stream(&stream(2, "c2")), fill(1, 10));
        assert_eq!(v.recipient(&user(2)), fill(4, 40));
        assert_eq!(v.stream(&stream(3, "c3")), fill(1, 10), "another shard's");
        assert_eq!(v.author(&user(9)), fill(2, 20));
    }

    #[test]
    fn a_report_measured_before_the_one_held_is_not_taken() {
        let mut v = Views::default();
        let s = stream(1, "c1");
        let at = |n, l: Level| Level {
            stamp: Stamp { boot: 1, n },
            ..l
        };
        v.report(
            &s,
            Some(&user(9)),
            at(5, level((2, 20), (4, 40))),
            UnixMs(10),
        );
        // An acknowledgement measured earlier, delayed past the later report.
        v.report(&s, None, at(3, level((1, 10), (1, 10))), UnixMs(11));
        assert_eq!(v.stream(&s), fill(2, 20));
        assert_eq!(v.recipient(&user(1)), fill(4, 40));
        assert_eq!(v.total(), fill(2, 20));
        // Nor an earlier "empty".
        v.report(&s, None, at(4, Level::default()), UnixMs(12));
        assert_eq!(v.stream(&s), fill(2, 20));
        // Nor an earlier whole report that did not list it.
        let all = Levels {
            from: ShardId(1),
            to: ShardId(0),
            streams: Vec::new(),
            complete: true,
            stamp: Stamp { boot: 1, n: 4 },
        };
        v.report_all(&all, UnixMs(13), |_| ShardId(1));
        assert_eq!(v.stream(&s), fill(2, 20));
        assert_eq!(v.recipient(&user(1)), fill(4, 40));
        // A later one, or one of a later incarnation, is.
        v.report(&s, None, at(6, level((1, 10), (3, 30))), UnixMs(14));
        assert_eq!(v.stream(&s), fill(1, 10));
        let reboot = Level {
            stamp: Stamp { boot: 2, n: 1 },
            ..Level::default()
        };
        v.report(&s, None, reboot, UnixMs(15));
        assert_eq!(v.stream(&s), Fill::default());
        assert_eq!(v.total(), Fill::default());
    }

    #[test]
    fn a_stale_view_is_asked_for_once_a_second() {
        let mut v = Views::default();
        let s = stream(1, "c1");
        v.report(&s, Some(&user(9)), level((3, 30), (3, 30)), UnixMs(1_000));
        assert!(!v.ask_if_stale(&s, UnixMs(1_999)), "fresh");
        assert!(v.ask_if_stale(&s, UnixMs(2_000)));
        assert!(
            !v.ask_if_stale(&s, UnixMs(2_500)),
            "asked, not answered yet"
        );
        assert!(
            v.ask_if_stale(&s, UnixMs(3_000)),
            "the answer was lost: again"
        );
        v.report(&s, None, level((3, 30), (3, 30)), UnixMs(3_100));
        assert!(!v.ask_if_stale(&s, UnixMs(3_200)));
        // Never reported: stale at once.
        assert!(v.ask_if_stale(&stream(2, "c2"), UnixMs(5)));
    }

    #[test]
    fn every_other_shard_is_asked_after_a_start_until_it_answers() {
        let mut v = Views::default();
        let me = ShardId(1);
        assert_eq!(v.next_ask(me, 3), Some(UnixMs(0)));
        assert_eq!(v.to_ask(me, 3, UnixMs(5)), vec![ShardId(0), ShardId(2)]);
        assert!(v.to_ask(me, 3, UnixMs(6)).is_empty());
        assert_eq!(v.next_ask(me, 3), Some(UnixMs(5 + super::super::RESEND_MS)));
        let answer = |from| Levels {
            from,
            to: me,
            streams: Vec::new(),
            complete: true,
            stamp: Stamp::default(),
        };
        v.report_all(&answer(ShardId(0)), UnixMs(7), |_| ShardId(0));
        let later = UnixMs(5 + super::super::RESEND_MS);
        assert_eq!(v.to_ask(me, 3, later), vec![ShardId(2)]);
        v.report_all(&answer(ShardId(2)), later, |_| ShardId(2));
        assert_eq!(v.next_ask(me, 3), None);
        assert_eq!(v.next_ask(ShardId(0), 1), None, "one shard asks nobody");
    }

    #[test]
    fn each_shard_decides_its_share_of_the_total() {
        assert_eq!(total_share(1_000, 1), 1_000);
        assert_eq!(total_share(1_000, 3), 333);
        assert_eq!(total_share(1_000, 0), 1_000);
    }
}
