//! The sender's shard's side of a submitted `msg`: each one sent to its conversation's owner
//! is kept until its verdict comes, and sent again every [`RESEND_MS`] until then (the owner
//! answers a repeat by the message's id, as a resend: the same seq, nothing stored twice).
//! A submission lost on its way, or a verdict lost on its way back, so never leaves its
//! sender waiting on an open connection for an `ack` that cannot come.
//!
//! A submission is kept while its connection is open: a closed one's client sends its
//! unacknowledged messages again on its next connection. At most [`MAX_SUBMISSIONS_WAITING`]
//! are kept per shard; one past it is sent once, as any crossing, and a loss then waits for
//! the client's next connection.

use std::collections::{BTreeMap, BTreeSet};

use wire::{MessageId, UnixMs};

use super::{RESEND_MS, Reply, Submission, Submitted};

/// Submitted messages without a verdict that one shard keeps, and sends again, at most.
pub const MAX_SUBMISSIONS_WAITING: usize = 4_096;

/// The `msg` submissions of a sender's shard waiting for their verdicts: by connection and
/// message id, with when each is sent again.
#[derive(Debug, Clone, Default)]
pub struct Submissions {
    /// Connection -> message id -> (the submission, when it is sent again).
    waiting: BTreeMap<u64, BTreeMap<MessageId, (Submission, UnixMs)>>,
    /// (when it is sent again, connection, id), soonest first.
    schedule: BTreeSet<(UnixMs, u64, MessageId)>,
    /// How many wait, over every connection.
    len: usize,
}

impl Submissions {
    /// `s` was sent at `now`: a `msg` is kept until its verdict comes (`false`: not kept, a
    /// retraction or past [`MAX_SUBMISSIONS_WAITING`]). Sent again for an id already waiting,
    /// it replaces that one.
    pub fn sent(&mut self, s: &Submission, now: UnixMs) -> bool {
        let Submitted::Msg(m) = &s.frame else {
            return false;
        };
        let held = self
            .waiting
            .get(&s.conn)
            .is_some_and(|c| c.contains_key(&m.id));
        if !held && self.len >= MAX_SUBMISSIONS_WAITING {
            return false;
        }
        let at = now.plus_ms(RESEND_MS);
        let conn = self.waiting.entry(s.conn).or_default();
        match conn.insert(m.id.clone(), (s.clone(), at)) {
            Some((_, old)) => {
                self.schedule.remove(&(old, s.conn, m.id.clone()));
            }
            None => self.len += 1,
        }
        self.schedule.insert((at, s.conn, m.id.clone()));
        true
    }

    /// The verdict `reply` for a frame of connection `conn` came: its submission no longer
    /// waits. `true` if one did.
    pub fn answered(&mut self, conn: u64, reply: &Reply) -> bool {
        let id = match reply {
            Reply::Ack { id, .. } => Some(id.clone()),
            Reply::Error { ref_type, id, .. } if ref_type == "msg" => {
                id.as_deref().and_then(|id| MessageId::parse(id).ok())
            }
            Reply::Error { .. } => None,
        };
        let Some(waiting) = self.waiting.get_mut(&conn) else {
            return false;
        };
        let Some((id, (_, at))) = id.and_then(|id| waiting.remove_entry(&id)) else {
            return false;
        };
        if waiting.is_empty() {
            self.waiting.remove(&conn);
        }
        self.schedule.remove(&(at, conn, id));
        self.len -= 1;
        true
    }

    /// Connection `conn` closed: its submissions are no longer sent again (its client sends
    /// its messages again on its next connection).
    pub fn closed(&mut self, conn: u64) {
        for (id, (_, at)) in self.waiting.remove(&conn).unwrap_or_default() {
            self.schedule.remove(&(at, conn, id));
            self.len -= 1;
        }
    }

    /// The submissions whose verdicts did not come by `now`, to send again; each is due
    /// again [`RESEND_MS`] later.
    pub fn due(&mut self, now: UnixMs) -> Vec<Submission> {
        let mut again = Vec::new();
        let next = now.plus_ms(RESEND_MS);
        while let Some((at, conn, id)) = self.schedule.first().cloned() {
            if at > now {
                break;
            }
            self.schedule.pop_first();
            if let Some((s, due)) = self.waiting.get_mut(&conn).and_then(|c| c.get_mut(&id)) {
                *due = next;
                again.push(s.clone());
                self.schedule.insert((next, conn, id));
            }
        }
        again
    }

    /// When the next submission is due again (`None`: none waits).
    pub fn next_deadline(&self) -> Option<UnixMs> {
        self.schedule.first().map(|(at, _, _)| *at)
    }

    /// How many wait.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handoff::ShardId;
    use wire::{ErrorCode, Seq, UserUuid};

    fn msg(conn: u64, id: &str) -> Submission {
        let frame: wire::frames::MsgFrame = serde_json::from_value(serde_json::json!({
            "id": id, "to": "bob_1", "conv_id": "c-1", "payload": "AA"
        }))
        .unwrap();
        Submission {
            from: ShardId(0),
            to: ShardId(1),
            conn,
            author: UserUuid::parse("00000000-0000-4000-8000-000000000001").unwrap(),
            frame: Submitted::Msg(frame),
        }
    }

    fn ids(due: &[Submission]) -> Vec<(u64, String)> {
        due.iter()
            .map(|s| match &s.frame {
                Submitted::Msg(m) => (s.conn, m.id.to_string()),
                Submitted::Retract(_) => (s.conn, "retract".into()),
            })
            .collect()
    }

    #[test]
    fn a_submission_without_a_verdict_goes_again_every_resend_period() {
        let mut subs = Submissions::default();
        assert!(subs.sent(&msg(1, "m1"), UnixMs(0)));
        assert!(subs.due(UnixMs(RESEND_MS - 1)).is_empty());
        assert_eq!(ids(&subs.due(UnixMs(RESEND_MS))), [(1, "m1".into())]);
        assert!(subs.due(UnixMs(RESEND_MS + 1)).is_empty());
        assert_eq!(subs.next_deadline(), Some(UnixMs(2 * RESEND_MS)));
        assert_eq!(ids(&subs.due(UnixMs(2 * RESEND_MS))), [(1, "m1".into())]);
    }

    #[test]
    fn an_ack_or_a_refusal_ends_the_wait_and_other_verdicts_do_not() {
        let mut subs = Submissions::default();
        subs.sent(&msg(1, "m1"), UnixMs(0));
        subs.sent(&msg(1, "m2"), UnixMs(0));
        let other = Reply::Error {
            code: ErrorCode::RATE_LIMITED,
            words: String::new(),
            ref_type: "typing".into(),
            id: Some("m1".into()),
        };
        assert!(!subs.answered(1, &other));
        assert!(!subs.answered(
            2,
            &Reply::Ack {
                id: MessageId::parse("m1").unwrap(),
                seq: Seq(1),
                new: true
            }
        ));
        let ack = Reply::Ack {
            id: MessageId::parse("m1").unwrap(),
            seq: Seq(1),
            new: true,
        };
        assert!(subs.answered(1, &ack));
        assert!(!subs.answered(1, &ack), "answered once");
        let refused = Reply::Error {
            code: ErrorCode::RATE_LIMITED,
            words: String::new(),
            ref_type: "msg".into(),
            id: Some("m2".into()),
        };
        assert!(subs.answered(1, &refused));
        assert!(subs.is_empty());
        assert_eq!(subs.next_deadline(), None);
    }

    #[test]
    fn a_closed_connection_forgets_its_submissions_and_the_bound_holds() {
        let mut subs = Submissions::default();
        subs.sent(&msg(1, "m1"), UnixMs(0));
        subs.sent(&msg(2, "m1"), UnixMs(0));
        subs.closed(1);
        assert_eq!(ids(&subs.due(UnixMs(RESEND_MS))), [(2, "m1".into())]);
        assert_eq!(subs.len(), 1);
        for n in 1..MAX_SUBMISSIONS_WAITING {
            assert!(subs.sent(&msg(3, &format!("n{n}")), UnixMs(0)));
        }
        assert!(!subs.sent(&msg(3, "over"), UnixMs(0)), "past the bound");
        assert!(
            subs.sent(&msg(2, "m1"), UnixMs(5)),
            "one waiting may be sent again"
        );
        assert_eq!(subs.len(), MAX_SUBMISSIONS_WAITING);
    }
}
