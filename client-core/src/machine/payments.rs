//! Payment events: `payment_confirmed` frames become [`Event::PaymentConfirmed`], once per order.
//!
//! The relay re-sends `payment_confirmed` on every `sync` for a while (there is no ack on the
//! wire, so it is delivered at least once). The machine deduplicates by `order_id` durably
//! ([`crate::store::ClientStore::put_confirmed_order`]) before it emits the event, so the app
//! sees one event per order across reconnects and restarts.

use wire::frames::PaymentConfirmedFrame;

use super::client::Client;
use super::event::{ClientError, Event};
use crate::store::ClientStore;

impl<S: ClientStore> Client<S> {
    /// A `payment_confirmed` frame: reported to the app once per order, durably.
    pub(super) fn on_payment_confirmed(
        &mut self,
        p: PaymentConfirmedFrame,
    ) -> Result<(), ClientError> {
        let order_id = p.order_id.into_string();
        if !self.store.has_confirmed_order(&order_id)? {
            self.store.put_confirmed_order(&order_id)?;
            self.out.event(Event::PaymentConfirmed {
                order_id,
                ref_id: p.ref_id,
            });
        } else {
            probes::probe!("client:payment-confirmed-duplicate");
        }
        Ok(())
    }
}
