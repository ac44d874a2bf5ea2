//! How the payment webhook reads a processor's reports: every answer counted once by its
//! outcome (`RelayStats::webhooks`, the metrics an operator watches), the bounds of a
//! payment id, which report of one payment is a replay, and which amount of a payment
//! counts toward its order.

use relay_core::WebhookStats;
use relay_core::limits::MAX_PAYMENT_ID_BYTES;
use serde_json::json;

use crate::orders::{HOLD_MS, SECRET, cw, purchase, status_of, webhook, webhook_raw};
use crate::refunds::order_of;
use crate::world::World;

fn counted(w: &World) -> WebhookStats {
    w.relay.stats().webhooks
}

#[test]
fn every_webhook_answer_is_counted_once_by_its_outcome() {
    let mut w = cw();
    let a = w.user("a");
    let (o, price) = order_of(&purchase(&mut w, &a, "66668888"));
    let mut want = WebhookStats::default();

    let body = json!({"payment_id": "p1", "order_id": o, "payment_status": "finished",
                      "paid_usdt": price})
    .to_string();
    assert_eq!(webhook_raw(&mut w, body.as_bytes(), Some("00")).status, 401);
    want.bad_signature += 1;
    assert_eq!(counted(&w), want);

    assert_eq!(
        webhook(&mut w, "o-unknown", "p0", "finished", 1).status,
        404
    );
    want.unknown_order += 1;
    assert_eq!(counted(&w), want);

    let bad = b"{\"payment_id\":1}";
    let sig = relay_core::payments::sign_webhook(SECRET, bad);
    assert_eq!(webhook_raw(&mut w, bad, Some(&sig)).status, 400);
    want.invalid += 1;
    assert_eq!(counted(&w), want);

    assert_eq!(webhook(&mut w, &o, "p1", "partially_paid", 1).status, 200);
    want.applied += 1;
    assert_eq!(counted(&w), want);

    // The processor's retry of the same report changes nothing.
    assert_eq!(webhook(&mut w, &o, "p1", "partially_paid", 1).status, 200);
    want.duplicate += 1;
    assert_eq!(counted(&w), want);

    assert_eq!(webhook(&mut w, &o, "p1", "finished", price).status, 200);
    want.applied += 1;
    assert_eq!(counted(&w), want);
    assert_eq!(status_of(&mut w, &o)["status"], "confirmed");

    // Once the payment finished, any later report of it (even a different one) is a replay.
    assert_eq!(webhook(&mut w, &o, "p1", "failed", 0).status, 200);
    assert_eq!(webhook(&mut w, &o, "p1", "finished", price).status, 200);
    want.duplicate += 2;
    assert_eq!(counted(&w), want);
    assert_eq!(status_of(&mut w, &o)["status"], "confirmed");
}

#[test]
fn a_payment_id_is_one_to_max_payment_id_bytes_long() {
    let mut w = cw();
    let a = w.user("a");
    let (o, _) = order_of(&purchase(&mut w, &a, "66668888"));
    let r = webhook(&mut w, &o, "", "partially_paid", 1);
    assert_eq!(r.status, 400);
    assert_eq!(r.error_code().as_deref(), Some("INVALID_FIELD"));
    let longest = "p".repeat(MAX_PAYMENT_ID_BYTES);
    assert_eq!(
        webhook(&mut w, &o, &longest, "partially_paid", 1).status,
        200
    );
    let too_long = "p".repeat(MAX_PAYMENT_ID_BYTES + 1);
    let r = webhook(&mut w, &o, &too_long, "partially_paid", 1);
    assert_eq!(r.status, 400);
    assert_eq!(r.error_code().as_deref(), Some("INVALID_FIELD"));
    let stats = counted(&w);
    assert_eq!((stats.applied, stats.invalid), (1, 2));
}

#[test]
fn a_later_report_of_more_money_on_the_same_payment_counts_the_larger_amount() {
    let mut w = cw();
    let a = w.user("a");
    let (o, price) = order_of(&purchase(&mut w, &a, "66668888"));
    assert!(price > 2);
    assert_eq!(webhook(&mut w, &o, "p1", "partially_paid", 1).status, 200);
    // Same status, more money: a new report, not a replay.
    assert_eq!(
        webhook(&mut w, &o, "p1", "partially_paid", price - 1).status,
        200
    );
    assert_eq!(counted(&w).applied, 2);
    assert_eq!(status_of(&mut w, &o)["status"], "pending");
    // A second payment finishes the last unit: the total covers the price.
    assert_eq!(webhook(&mut w, &o, "p2", "finished", 1).status, 200);
    assert_eq!(status_of(&mut w, &o)["status"], "confirmed");
}

#[test]
fn the_full_amount_confirms_only_once_its_payment_reports_finished() {
    let mut w = cw();
    let a = w.user("a");
    let (o, price) = order_of(&purchase(&mut w, &a, "66668888"));
    // The whole price arrived but the processor has not finished the payment yet.
    assert_eq!(
        webhook(&mut w, &o, "p1", "partially_paid", price).status,
        200
    );
    assert_eq!(status_of(&mut w, &o)["status"], "pending");
    // Same payment, same amount, now finished: not a replay, it pays the order.
    assert_eq!(webhook(&mut w, &o, "p1", "finished", price).status, 200);
    assert_eq!(status_of(&mut w, &o)["status"], "confirmed");
    assert_eq!(counted(&w).applied, 2);
}

#[test]
fn a_paid_order_stays_confirmed_past_its_deadline_whatever_reports_follow() {
    let mut w = cw();
    let a = w.user("a");
    let (o, price) = order_of(&purchase(&mut w, &a, "66668888"));
    assert_eq!(webhook(&mut w, &o, "p1", "finished", price).status, 200);
    w.advance(HOLD_MS);
    assert_eq!(status_of(&mut w, &o)["status"], "confirmed");
    assert_eq!(webhook(&mut w, &o, "p1", "finished", price).status, 200);
    assert_eq!(webhook(&mut w, &o, "p2", "partially_paid", 1).status, 200);
    assert_eq!(status_of(&mut w, &o)["status"], "confirmed");
}
