//! The hosts of a run besides the relay's, added in the order turmoil numbers them: `pay`
//! (the outside world), the client hosts (`c0`.. one account each; `h0`.. several accounts
//! each at the large scale), the strangers `x0`.. that have something to do, and the drill
//! host `t0` ([`crate::drills`]).
//!
//! The outside world shares one host (turmoil scans every link per host per step, so fewer
//! hosts is faster): the payment processor stand-in on [`PAY_PORT`], a forger (wrong secret)
//! on [`FORGER_PORT`], the push services (Web Push, FCM and APNs; the relay delivers to them
//! for real, see [`crate::pushworld`]) and the app of an account that audits commerce.

use std::net::{Ipv4Addr, SocketAddr};
use std::rc::Rc;

use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng as _;

use super::Parts;
use super::step::Sim;
use crate::apps::{auditor_host, client_app};
use crate::bounds::{FORGER_PORT, PAY, PAY_PORT};
use crate::drills::{DRILL_HOST, drill_host};
use crate::hostile::stranger_host;
use crate::pushworld::{APNS_PORT, FCM_PORT, WEB_PUSH_PORT};
use crate::seeds::{TAG_AUDITOR, derive_seed};
use crate::time::SkewClock;
use crate::world::HostCtx;
use client::SharedStore;
use seam::net::Turmoil;

/// The `pay` host: the payment and push stand-ins, and the commerce auditor's app (as
/// client index `clients`, with a store and an unskewed clock of its own).
pub(super) fn add_pay_host(sim: &mut Sim<'_>, parts: &Parts<'_>) {
    let processor = parts.payments.processor.clone();
    let forger = parts.payments.forger.clone();
    let push = parts.push.clone();
    let clients = parts.scenario.accounts.len();
    let ctx = parts.host_ctx(clients, &SharedStore::new(), &parts.auditor_clock);
    let mnemonic = auditor_mnemonic(parts.replay.seed);
    sim.host(PAY, move || {
        let (processor, forger, push) = (processor.clone(), forger.clone(), push.clone());
        let ctx = Rc::clone(&ctx);
        let mnemonic = mnemonic.clone();
        async move {
            let on = |port| SocketAddr::from((Ipv4Addr::UNSPECIFIED, port));
            let genuine = processor.run::<Turmoil>(on(PAY_PORT), std::future::pending());
            let forged = forger.run::<Turmoil>(on(FORGER_PORT), std::future::pending());
            let web = push
                .web
                .run::<Turmoil>(on(WEB_PUSH_PORT), std::future::pending());
            let fcm = push
                .fcm
                .run::<Turmoil>(on(FCM_PORT), std::future::pending());
            let apns = push
                .apns
                .run::<Turmoil>(on(APNS_PORT), std::future::pending());
            let (a, b, c, d, e, ()) = tokio::join!(
                genuine,
                forged,
                web,
                fcm,
                apns,
                auditor_host(ctx, &mnemonic)
            );
            a?;
            b?;
            c?;
            d?;
            e?;
            Ok(())
        }
    });
}

/// The commerce auditor's mnemonic, drawn from the seed.
fn auditor_mnemonic(seed: u64) -> String {
    let mut rng = ChaCha20Rng::from_seed(derive_seed(seed, TAG_AUDITOR, 0));
    client_core::keys::new_mnemonic(&mut rng)
        .expose()
        .to_owned()
}

/// Every client host, with the apps of its accounts; their clocks take the host's skew.
pub(super) fn add_client_hosts(sim: &mut Sim<'_>, parts: &Parts<'_>) {
    let scenario = &parts.scenario;
    for host in scenario.client_hosts() {
        let ctxs: Vec<Rc<HostCtx>> = scenario
            .clients_on(&host)
            .into_iter()
            .map(|i| parts.host_ctx(i, &parts.stores[i], &parts.clocks[i]))
            .collect();
        let clocks = scenario
            .clients_on(&host)
            .into_iter()
            .map(|i| parts.clocks[i].clone())
            .collect();
        sim.skewed(&host, clocks);
        sim.host(host.as_str(), move || {
            let ctxs = ctxs.clone();
            async move {
                futures_util::future::join_all(ctxs.into_iter().map(client_app)).await;
                Ok(())
            }
        });
    }
}

/// The drill host `t0` (see [`crate::drills`]), when the run has drills.
pub(super) fn add_drill_host(sim: &mut Sim<'_>, parts: &Parts<'_>, config: &relay_core::Config) {
    let drills = parts.replay.drills.clone();
    if drills.is_empty() {
        return;
    }
    let ctx = parts.host_ctx(usize::MAX, &SharedStore::new(), &SkewClock::default());
    let config = config.clone();
    sim.host(DRILL_HOST, move || {
        let (ctx, drills, config) = (Rc::clone(&ctx), drills.clone(), config.clone());
        async move {
            drill_host(ctx, drills, config).await;
            std::future::pending::<()>().await;
            Ok(())
        }
    });
}

/// Every stranger with something to do: a request to reject or an act in the plan (an idle
/// one would cost a host per step for nothing).
pub(super) fn add_stranger_hosts(sim: &mut Sim<'_>, parts: &Parts<'_>) {
    let (scenario, plan) = (&parts.scenario, &parts.replay.plan);
    for (i, s) in scenario.strangers.iter().enumerate() {
        let busy = scenario.rejections.iter().any(|r| r.stranger == i)
            || plan
                .events
                .iter()
                .any(|e| e.action.hosts().contains(&s.host.as_str()));
        if !busy {
            continue;
        }
        let ctx = parts.host_ctx(i, &SharedStore::new(), &SkewClock::default());
        sim.host(s.host.as_str(), move || {
            let ctx = Rc::clone(&ctx);
            async move {
                stranger_host(ctx).await;
                Ok(())
            }
        });
    }
}
