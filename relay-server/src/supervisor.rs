//! A campaigning server's loop ([`Supervisor`]): stand by, campaign for leadership, serve each
//! term won with one core, fail-stop when it ends, stand by again.

use std::sync::{Arc, atomic::AtomicBool};
use std::time::Duration;

use relay_core::Relay;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{error, info, warn};

use super::driver::{CoreParts, Cores, Input, Phase, TermCtx};
use super::leadership::{
    CAMPAIGN_RETRY_MAX_MS, CAMPAIGN_RETRY_MS, CampaignError, Leadership, Term, TermEnd,
};
use super::{CoreCtx, INPUT_QUEUE_CAPACITY, RelayOpener, count_leading};

/// A campaigning server's loop: standby, campaign, serve the term, fail-stop, standby again.
pub(super) struct Supervisor {
    pub(super) leadership: Box<dyn Leadership>,
    pub(super) ctx: CoreCtx,
    pub(super) phase: Arc<watch::Sender<Phase>>,
    pub(super) stop: watch::Receiver<bool>,
}

impl Supervisor {
    /// Campaigns, serves every term it wins and stands by again after each, until shutdown or
    /// until the leadership fails for good (its reason goes to `fatal`).
    pub(super) async fn run(mut self, mut parts: CoreParts, fatal: oneshot::Sender<String>) {
        let mut retry_ms = CAMPAIGN_RETRY_MS;
        loop {
            if *self.stop.borrow() {
                break;
            }
            let Some(campaigned) = self.campaign().await else {
                break;
            };
            let term = match campaigned {
                Ok(term) => term,
                Err(CampaignError::Fatal(why)) => {
                    let _ = fatal.send(why);
                    break;
                }
                Err(CampaignError::Retry(why)) => {
                    warn!(reason = %why, retry_ms, "campaign failed; retrying");
                    if !pause(self.stop.clone(), &mut retry_ms).await {
                        break;
                    }
                    continue;
                }
            };
            retry_ms = CAMPAIGN_RETRY_MS;
            let Term {
                mut open,
                end,
                epoch,
                holder,
            } = term;
            info!(?epoch, "leading: loading the state");
            let relay = match open() {
                Ok(relay) => relay,
                Err(e) => {
                    error!(error = %e, ?epoch, "taking over: loading the state failed; resigning");
                    drop(holder);
                    if !pause(self.stop.clone(), &mut retry_ms).await {
                        break;
                    }
                    continue;
                }
            };
            if let Some(why) = end.ended() {
                warn!(reason = %why, ?epoch, "the term ended while loading the state");
                continue;
            }
            let Some((inputs, store_down)) = self.activate(epoch, &relay) else {
                break;
            };
            parts = self
                .serve_term(relay, open, parts, inputs, store_down, &end)
                .await;
            // The core is gone: end the term (if shutdown ended it) and resign.
            end.end("the relay stopped serving");
            drop(holder);
        }
        info!("campaigning stopped");
    }

    /// Stands by and campaigns: the campaign's result, or `None` once shutdown begins.
    async fn campaign(&mut self) -> Option<Result<Term, CampaignError>> {
        info!("standby: campaigning for leadership (/readyz answers 503 NOT_LEADER)");
        let mut stop = self.stop.clone();
        tokio::select! {
            biased;
            _ = stop.wait_for(|stop| *stop) => None,
            result = self.leadership.campaign() => Some(result),
        }
    }

    /// Turns the phase active for the term of `epoch` with a new core's inputs (unless the
    /// server is stopping: `None`), and sets the term's metrics; returns that core's side of
    /// the inputs and its store-down flag.
    fn activate(
        &self,
        epoch: Option<u64>,
        relay: &Relay,
    ) -> Option<(mpsc::Receiver<Input>, Arc<AtomicBool>)> {
        let (inputs_tx, inputs_rx) = mpsc::channel(INPUT_QUEUE_CAPACITY);
        let store_down = Arc::new(AtomicBool::new(false));
        let activated = self.phase.send_if_modified(|phase| {
            if matches!(phase, Phase::Stopping) {
                return false;
            }
            *phase = Phase::Active {
                inputs: Cores::one(inputs_tx),
                epoch,
                store_down: Arc::clone(&store_down),
            };
            true
        });
        if !activated {
            return None;
        }
        info!(?epoch, "active: serving clients (/readyz answers 200)");
        count_leading(self.ctx.metrics.as_ref(), relay.config(), epoch);
        Some((inputs_rx, store_down))
    }

    /// Serves the term that `end` ends: runs a core on `relay` until the term ends or the
    /// server stops, then counts the server standing by. Returns what the next term reuses.
    async fn serve_term(
        &mut self,
        relay: Relay,
        open: RelayOpener,
        parts: CoreParts,
        inputs: mpsc::Receiver<Input>,
        store_down: Arc<AtomicBool>,
        end: &TermEnd,
    ) -> CoreParts {
        let term = TermCtx {
            end: end.clone(),
            phase: Some(Arc::clone(&self.phase)),
        };
        let core = self
            .ctx
            .core(relay, open, parts.push, store_down, Some(term));
        // The server stands by the moment the term ends, also while the core task is busy
        // (a batch, a rebuild, a paused process that resumes): `/readyz` and the gate never
        // answer for a term that is over.
        let standby = tokio::spawn(stand_by_when_ended(end.clone(), Arc::clone(&self.phase)));
        let parts = core.run(inputs, self.stop.clone(), parts.gone).await;
        standby.abort();
        if let Some(metrics) = &self.ctx.metrics {
            metrics.standing_by();
        }
        parts
    }
}

/// Once `end` ends, turns an active `phase` standby (the core task does too when it sees the
/// end; whichever is first).
async fn stand_by_when_ended(end: TermEnd, phase: Arc<watch::Sender<Phase>>) {
    end.wait().await;
    Phase::stand_by(&phase);
}

/// Waits `retry_ms` (doubled for next time, up to the maximum); false on shutdown.
pub(super) async fn pause(mut stop: watch::Receiver<bool>, retry_ms: &mut u64) -> bool {
    let delay = Duration::from_millis(*retry_ms);
    *retry_ms = (*retry_ms * 2).min(CAMPAIGN_RETRY_MAX_MS);
    tokio::select! {
        biased;
        _ = stop.wait_for(|stop| *stop) => false,
        () = tokio::time::sleep(delay) => true,
    }
}
