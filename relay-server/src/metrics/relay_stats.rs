//! The relay's own counters ([`RelayStats`]) exported: what each core counted since its last
//! export, added to the families (a sharded server's cores each add theirs, so a counter is
//! the sum over them).

use prometheus_client::metrics::counter::Counter;
use relay_core::RelayStats;

use super::Metrics;
use super::labels::{Recipient, RecipientLabels, WebhookLabels, WebhookResult};

impl Metrics {
    /// Adds what the relay counted since `last` (a rebuilt relay restarts from zero).
    pub(crate) fn relay_stats(&self, now: &RelayStats, last: &RelayStats) {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        let add = |c: &Counter, n: u64| {
            if n > 0 {
                c.inc_by(n);
            }
        };
        let f = &*self.f;
        let accepted = |r| {
            f.messages_accepted
                .get_or_create_owned(&RecipientLabels { recipient: r })
        };
        add(
            &accepted(Recipient::Online),
            d(now.messages_accepted_online, last.messages_accepted_online),
        );
        add(
            &accepted(Recipient::Offline),
            d(
                now.messages_accepted_offline,
                last.messages_accepted_offline,
            ),
        );
        add(
            &f.messages_deduplicated,
            d(now.messages_deduplicated, last.messages_deduplicated),
        );
        add(&f.syncs, d(now.syncs, last.syncs));
        add(
            &f.sync_backlog_messages,
            d(now.sync_backlog_messages, last.sync_backlog_messages),
        );
        self.read_stats(now, last);
        self.handoff_stats(now, last);
        let (w, lw) = (&now.webhooks, &last.webhooks);
        add(&f.refunds_needed, d(w.refund_needed, lw.refund_needed));
        for (result, n) in [
            (WebhookResult::Applied, d(w.applied, lw.applied)),
            (WebhookResult::Duplicate, d(w.duplicate, lw.duplicate)),
            (
                WebhookResult::BadSignature,
                d(w.bad_signature, lw.bad_signature),
            ),
            (WebhookResult::Invalid, d(w.invalid, lw.invalid)),
            (
                WebhookResult::UnknownOrder,
                d(w.unknown_order, lw.unknown_order),
            ),
        ] {
            if n > 0 {
                f.webhooks
                    .get_or_create(&WebhookLabels { result })
                    .inc_by(n);
            }
        }
    }

    /// The relay's reads since `last`: rows read by kind, frames parked on reads ahead, reads
    /// made on the core task.
    fn read_stats(&self, now: &RelayStats, last: &RelayStats) {
        let f = &*self.f;
        for (counter, now, last) in [
            (
                &f.tombstone_sets_read,
                now.tombstone_sets_read,
                last.tombstone_sets_read,
            ),
            (
                &f.tombstone_rows_read,
                now.tombstone_rows_read,
                last.tombstone_rows_read,
            ),
            (&f.queues_read, now.queues_read, last.queues_read),
            (&f.accounts_read, now.accounts_read, last.accounts_read),
            (
                &f.conversations_read,
                now.conversations_read,
                last.conversations_read,
            ),
            (&f.contacts_read, now.contacts_read, last.contacts_read),
            (&f.frames_parked, now.frames_parked, last.frames_parked),
            (
                &f.requests_parked,
                now.requests_parked,
                last.requests_parked,
            ),
            (&f.sweeps_parked, now.sweeps_parked, last.sweeps_parked),
            (
                &f.crossings_parked,
                now.crossings_parked,
                last.crossings_parked,
            ),
            (
                &f.crossings_dropped_waiting,
                now.crossings_dropped_waiting,
                last.crossings_dropped_waiting,
            ),
            (&f.reads_inline, now.reads_inline, last.reads_inline),
        ] {
            let n = now.saturating_sub(last);
            if n > 0 {
                counter.inc_by(n);
            }
        }
    }

    /// What crossed between the relay's shards since `last`: hand-offs, submissions,
    /// notices, forwarded requests.
    fn handoff_stats(&self, now: &RelayStats, last: &RelayStats) {
        let f = &*self.f;
        for (counter, now, last) in [
            (
                &f.handed_off_messages,
                now.messages_handed_off,
                last.messages_handed_off,
            ),
            (
                &f.messages_submitted,
                now.messages_submitted,
                last.messages_submitted,
            ),
            (
                &f.submissions_resent,
                now.submissions_resent,
                last.submissions_resent,
            ),
            (
                &f.handoffs_applied,
                now.handoffs_applied,
                last.handoffs_applied,
            ),
            (
                &f.handoffs_repeated,
                now.handoffs_repeated,
                last.handoffs_repeated,
            ),
            (&f.handoffs_held, now.handoffs_held, last.handoffs_held),
            (&f.upgrades_held, now.upgrades_held, last.upgrades_held),
            (&f.notices_taken, now.notices_taken, last.notices_taken),
            (
                &f.requests_forwarded,
                now.requests_forwarded,
                last.requests_forwarded,
            ),
            (
                &f.forwards_timed_out,
                now.forwards_timed_out,
                last.forwards_timed_out,
            ),
        ] {
            let n = now.saturating_sub(last);
            if n > 0 {
                counter.inc_by(n);
            }
        }
    }
}
