//! **The simulator's legacy push path**
//! ([`RelayServer::with_push_gateway`](super::RelayServer::with_push_gateway)): the relay's `Push` outputs POSTed as plain, unencrypted JSON to a gateway (the recording
//! stand-in [`crate::standins::PushService`]) at `gateway` + [`push_path`], one at a time,
//! best effort (a failure is logged and dropped; the message itself stays queued in the relay
//! for the next `sync`).
//!
//! Real delivery (RFC 8291 Web Push with VAPID, FCM, APNs) is [`super::push`]
//! ([`RelayServer::with_push`](super::RelayServer::with_push)); this path stays only until the
//! simulator (`sim::sim`) moves to it, and is not reachable from the `relay` binary.

use std::time::Duration;

use relay_core::PushTarget;
use tokio::sync::mpsc;
use tracing::{Instrument as _, debug, info_span, warn};

use crate::net::{Connector, Endpoint, HttpClient, HttpRequest};

/// Pushes waiting for the worker; when full, new pushes are dropped (logged at WARN).
pub const PUSH_QUEUE_CAPACITY: usize = 256;
/// Timeout of one delivery.
const PUSH_TIMEOUT_MS: u64 = 5_000;

/// One push to deliver (the gateway is not told whose it is).
pub(super) struct PushJob {
    pub(super) target: PushTarget,
    pub(super) payload: wire::http::PushPayload,
}

/// The gateway path a push to `target` is POSTed to: `/web-push<endpoint path>`,
/// `/fcm/<token>` or `/apns/<token>` (characters outside `A-Z a-z 0-9 - . _ ~ : /` are
/// percent-encoded).
pub fn push_path(target: &PushTarget) -> String {
    match target {
        PushTarget::WebPush { endpoint, .. } => {
            let after_scheme = endpoint
                .split_once("://")
                .map_or(endpoint.as_str(), |(_, r)| r);
            let path = after_scheme.find('/').map_or("/", |i| &after_scheme[i..]);
            format!("/web-push{}", encode_path(path))
        }
        PushTarget::Fcm { token } => format!("/fcm/{}", encode_path(token).replace('/', "%2F")),
        PushTarget::Apns { token } => {
            format!("/apns/{}", encode_path(token).replace('/', "%2F"))
        }
    }
}

fn encode_path(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for b in raw.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~:/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Starts the delivery task; returns its bounded queue.
pub(super) fn spawn_worker<C: Connector>(connector: C, gateway: Endpoint) -> mpsc::Sender<PushJob> {
    let (tx, mut rx) = mpsc::channel::<PushJob>(PUSH_QUEUE_CAPACITY);
    let http =
        HttpClient::new(connector, gateway).with_timeout(Duration::from_millis(PUSH_TIMEOUT_MS));
    tokio::spawn(
        async move {
            while let Some(job) = rx.recv().await {
                let path = push_path(&job.target);
                let request = match HttpRequest::post(path).json(&job.payload) {
                    Ok(request) => request,
                    Err(error) => {
                        warn!(%error, "push payload did not encode");
                        continue;
                    }
                };
                match http.send(request).await {
                    Ok(response) if response.status.is_success() => {
                        debug!(kind = job.target.kind(), "push delivered to the gateway");
                    }
                    Ok(response) => {
                        warn!(
                            kind = job.target.kind(),
                            status = response.status.as_u16(),
                            "push refused by the gateway"
                        );
                    }
                    Err(error) => {
                        warn!(kind = job.target.kind(), %error, "push not delivered to the gateway");
                    }
                }
            }
        }
        .instrument(info_span!("push")),
    );
    tx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        let web = PushTarget::WebPush {
            endpoint: "https://push.example/send/ab c".into(),
            p256dh: String::new(),
            auth: String::new(),
        };
        assert_eq!(push_path(&web), "/web-push/send/ab%20c");
        let fcm = PushTarget::Fcm {
            token: "x:y/z".into(),
        };
        assert_eq!(push_path(&fcm), "/fcm/x:y%2Fz");
        let apns = PushTarget::Apns {
            token: "0a1b".into(),
        };
        assert_eq!(push_path(&apns), "/apns/0a1b");
    }
}
