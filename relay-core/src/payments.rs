//! The payment processor's webhook: `POST /api/v1/payments/webhook`, body
//! [`wire::http::PaymentWebhook`], signed with `x-payment-signature` = hex
//! HMAC-SHA256(`Config::payment_webhook_secret`, raw body). The signature is verified in
//! constant time **before** the body is parsed. Outcomes: NOTES.md, "Commerce".

use hmac::{Hmac, KeyInit as _, Mac as _};
use sha2::Sha256;
use wire::http::{
    OkResponse, OrderKind, OrderState, PAYMENT_SIGNATURE_HEADER, PaymentStatus, PaymentWebhook,
};
use wire::{AliasId, ErrorCode, OrderId, UnixMs};

use crate::commerce_state::{OrderRow, PaymentRow};
use crate::cx::Cx;
use crate::http::{ApiError, HttpRequest, HttpResponse};
use crate::limits::MAX_PAYMENT_ID_BYTES;
use crate::store::StoreError;

fn unhex(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if !b.len().is_multiple_of(2) {
        return None;
    }
    b.chunks(2)
        .map(|p| {
            let h = std::str::from_utf8(p).ok()?;
            if !h.bytes().all(|c| c.is_ascii_hexdigit()) {
                return None;
            }
            u8::from_str_radix(h, 16).ok()
        })
        .collect()
}

/// Verifies `signature` (hex, either case) over `body` with `secret`, in constant time.
/// An empty secret verifies nothing (the webhook is disabled until one is configured).
pub(crate) fn verify_signature(secret: &[u8], body: &[u8], signature: Option<&str>) -> bool {
    if secret.is_empty() {
        return false;
    }
    let Some(sig) = signature.map(str::trim).and_then(unhex) else {
        return false;
    };
    let Ok(mut mac) = <Hmac<Sha256>>::new_from_slice(secret) else {
        return false;
    };
    mac.update(body);
    mac.verify_slice(&sig).is_ok()
}

/// The signature a processor sends for `body` (tests and the simulator's stand-in).
pub fn sign_webhook(secret: &[u8], body: &[u8]) -> String {
    match <Hmac<Sha256>>::new_from_slice(secret) {
        Ok(mut mac) => {
            mac.update(body);
            crate::ids::hex(&mac.finalize().into_bytes())
        }
        Err(_) => String::new(),
    }
}

impl Cx<'_> {
    /// The payment webhook (processor → relay). Always 200 once the signature verifies and
    /// the body names a known order, so the processor stops retrying.
    pub(crate) fn http_payment_webhook(
        &mut self,
        now: UnixMs,
        req: &HttpRequest,
    ) -> Result<HttpResponse, ApiError> {
        let result = self.payment_webhook(now, req);
        let counts = &mut self.stats.webhooks;
        match &result {
            Ok(Webhook::Applied) => counts.applied += 1,
            Ok(Webhook::Duplicate) => counts.duplicate += 1,
            Err(e) if e.code == ErrorCode::WEBHOOK_SIGNATURE_INVALID => counts.bad_signature += 1,
            Err(e) if e.code == ErrorCode::ORDER_NOT_FOUND => counts.unknown_order += 1,
            Err(_) => counts.invalid += 1,
        }
        result.map(|_| HttpResponse::json(200, &OkResponse::OK))
    }

    /// [`http_payment_webhook`](Self::http_payment_webhook) before its answer is counted.
    fn payment_webhook(&mut self, now: UnixMs, req: &HttpRequest) -> Result<Webhook, ApiError> {
        let body = self.signed_webhook(req)?;
        // Whether an account has the alias a vanity order is for (a late payment is honoured
        // only if not), read before anything changes.
        let alias_in_use = self.vanity_alias_in_use(&body.order_id)?;
        // An order past its deadline is expired first, whether or not its timer fired yet.
        self.expire_order(now, &body.order_id);
        let prev = self
            .state
            .commerce()
            .payments
            .get(&body.payment_id)
            .cloned();
        if let Some(p) = &prev {
            if p.order_id != body.order_id {
                probes::probe!("webhook:payment-id-reused");
                return Err(ApiError::new(
                    ErrorCode::INVALID_FIELD,
                    "this payment_id was already reported for another order",
                ));
            }
            // Exact replays, and anything after a payment finished, change nothing.
            if p.status == PaymentStatus::Finished
                || (p.status == body.payment_status && p.paid_usdt == body.paid_usdt)
            {
                probes::probe!("webhook:duplicate");
                return Ok(Webhook::Duplicate);
            }
        }
        let paid = prev
            .as_ref()
            .map_or(body.paid_usdt, |p| p.paid_usdt.max(body.paid_usdt));
        self.state.put_payment(PaymentRow {
            payment_id: body.payment_id.clone(),
            order_id: body.order_id.clone(),
            status: body.payment_status,
            paid_usdt: paid,
            at: now,
        });
        let Some(mut o) = self.state.commerce().orders.get(&body.order_id).cloned() else {
            return Err(ApiError::new(ErrorCode::ORDER_NOT_FOUND, "no such order"));
        };
        let (total, any_finished) = self.paid_so_far(&o.id);
        // Paid in full once the total covers the price and one of its payments finished,
        // whichever copy arrives last: a `finished` top-up may overtake the `partially_paid`
        // underpayment it completes.
        o.paid_usdt = total;
        let paid_in_full = any_finished && total >= o.price_usdt;
        let finished = body.payment_status == PaymentStatus::Finished && paid_in_full;
        self.settle_order(now, o, (paid_in_full, finished), alias_in_use);
        Ok(Webhook::Applied)
    }

    /// What a payment report makes of order `o` (its `paid_usdt` up to date): confirmed when
    /// paid in full in time, or late while what it sells is still available; a refund owed
    /// when paid late for what is gone, or paid again (`finished`: this report finished a
    /// payment that pays in full) after it was confirmed; otherwise only its paid total.
    fn settle_order(
        &mut self,
        now: UnixMs,
        mut o: OrderRow,
        (paid_in_full, finished): (bool, bool),
        alias_in_use: bool,
    ) {
        match (o.state, paid_in_full, finished) {
            (OrderState::Pending, true, _) => {
                probes::probe!("webhook:paid-in-time");
                self.confirm_order(now, o);
            }
            (OrderState::Expired, true, _) if self.still_available(&o, alias_in_use) => {
                probes::probe!("webhook:late-honoured");
                self.confirm_order(now, o);
            }
            (OrderState::Expired, true, _) => {
                probes::probe!("webhook:late-refund");
                self.stats.webhooks.refund_needed += 1;
                o.refund_needed = true;
                self.state.put_order(o);
            }
            (OrderState::Confirmed, _, true) => {
                // A second, separate payment of an order already paid.
                probes::probe!("webhook:second-payment-refund");
                self.stats.webhooks.refund_needed += 1;
                o.refund_needed = true;
                self.state.put_order(o);
            }
            _ => {
                probes::probe!("webhook:partial-or-pending");
                self.state.put_order(o);
            }
        }
    }

    /// The webhook's body, once its signature verifies (`x-payment-signature`, HMAC of the
    /// body with the configured secret), its `payment_id` is 1 to `MAX_PAYMENT_ID_BYTES`
    /// bytes and its order exists.
    fn signed_webhook(&self, req: &HttpRequest) -> Result<PaymentWebhook, ApiError> {
        if !verify_signature(
            &self.config.payment_webhook_secret.0,
            &req.body,
            req.header_value(PAYMENT_SIGNATURE_HEADER),
        ) {
            return Err(ApiError::new(
                ErrorCode::WEBHOOK_SIGNATURE_INVALID,
                "missing or invalid x-payment-signature",
            ));
        }
        let body: PaymentWebhook = wire::http::decode_body(&req.body)?;
        if body.payment_id.is_empty() || body.payment_id.len() > MAX_PAYMENT_ID_BYTES {
            return Err(ApiError::new(
                ErrorCode::INVALID_FIELD,
                format!("payment_id must be 1 to {MAX_PAYMENT_ID_BYTES} bytes"),
            ));
        }
        if !self.state.commerce().orders.contains_key(&body.order_id) {
            return Err(ApiError::new(ErrorCode::ORDER_NOT_FOUND, "no such order"));
        }
        Ok(body)
    }

    /// Whether an account has the alias the vanity order `order_id` is for (`false` for any
    /// other order).
    fn vanity_alias_in_use(&mut self, order_id: &OrderId) -> Result<bool, StoreError> {
        match self.state.commerce().orders.get(order_id) {
            Some(o) if o.kind == OrderKind::Vanity => match AliasId::parse(&o.target) {
                Ok(a) => self.alias_in_use(&a),
                Err(_) => Ok(false),
            },
            _ => Ok(false),
        }
    }

    /// What order `order` was paid so far: the total of its payments that did not fail, and
    /// whether one of them finished.
    fn paid_so_far(&self, order: &OrderId) -> (u64, bool) {
        let live: Vec<&PaymentRow> = self
            .state
            .commerce()
            .payments_of
            .get(order)
            .into_iter()
            .flatten()
            .filter_map(|pid| self.state.commerce().payments.get(pid))
            .filter(|p| p.status != PaymentStatus::Failed)
            .collect();
        let total = live
            .iter()
            .map(|p| p.paid_usdt)
            .fold(0u64, u64::saturating_add);
        let any_finished = live.iter().any(|p| p.status == PaymentStatus::Finished);
        (total, any_finished)
    }
}

/// What a verified webhook did.
enum Webhook {
    /// A payment was recorded.
    Applied,
    /// Nothing changed (an exact replay, or a report after the payment finished).
    Duplicate,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures() {
        let sig = sign_webhook(b"k", b"body");
        assert_eq!(sig.len(), 64);
        assert!(verify_signature(b"k", b"body", Some(&sig)));
        assert!(verify_signature(b"k", b"body", Some(&sig.to_uppercase())));
        assert!(!verify_signature(b"k", b"body2", Some(&sig)));
        assert!(!verify_signature(b"k2", b"body", Some(&sig)));
        assert!(!verify_signature(b"k", b"body", None));
        assert!(!verify_signature(b"k", b"body", Some("zz")));
        assert!(!verify_signature(b"k", b"body", Some(&sig[..62])));
        assert!(!verify_signature(
            b"",
            b"body",
            Some(&sign_webhook(b"", b"body"))
        ));
    }
}
