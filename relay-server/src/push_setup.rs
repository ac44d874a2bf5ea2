//! Push delivery from the flags (binary only): Web Push with its VAPID key (loaded, created or
//! rotated in the secrets directory), FCM and APNs credentials, and the destination policy
//! every push and subscription is checked against.

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng as _;
use relay_pg::KeyFingerprint;
use relay_push::{
    ApnsConfig, FcmConfig, HttpsTransport, ServiceAccount, VapidKey, VapidSubject, WebPushConfig,
    WorkerConfig,
};
use relay_server::{PushDelivery, secrets};
use tracing::{info, warn};

use crate::cli::Args;
use crate::os_bytes;

/// File name of the VAPID key inside `--data` or `--secrets-dir` (next to `jwt-signing.key`).
pub(crate) const VAPID_KEY_FILE: &str = "vapid.pem";

/// Push delivery from the flags: each kind with credentials is enabled (the worker warns
/// once about each kind without). TLS to the push services; `http://` only in test mode.
/// Also returns the VAPID key's fingerprint when Web Push is enabled.
pub(crate) fn push_delivery(
    args: &Args,
    key_dir: Option<&Path>,
) -> Result<(PushDelivery, Option<KeyFingerprint>)> {
    let test_mode = args.test_mode;
    let (web_push, vapid_fingerprint) = web_push_config(args, key_dir)?;
    let fcm = fcm_config(args)?;
    let apns = apns_config(args)?;
    let transport = HttpsTransport::new()
        .context("setting up TLS for push delivery")?
        .with_destinations(push_destinations(args, fcm.as_ref(), apns.as_ref())?)
        .context("setting up TLS for push delivery")?;
    if transport.destinations().allow_private && !test_mode {
        warn!(
            "--push-allow-private: pushes may go to private and loopback addresses; never on a \
             relay that serves the internet"
        );
    }
    let config = WorkerConfig {
        web_push,
        fcm,
        apns,
        ..WorkerConfig::default()
    };
    Ok((
        PushDelivery::over_https(config, transport, os_bytes()?),
        vapid_fingerprint,
    ))
}

/// Web Push when `--vapid-subject` is given: its VAPID key ([`vapid_key`]) and that key's
/// fingerprint; `http://` subscriptions only in test mode.
fn web_push_config(
    args: &Args,
    key_dir: Option<&Path>,
) -> Result<(Option<WebPushConfig>, Option<KeyFingerprint>)> {
    let Some(subject) = &args.vapid_subject else {
        return Ok((None, None));
    };
    let subject = VapidSubject::parse(subject).context("--vapid-subject")?;
    let key = vapid_key(args, key_dir)?;
    let fingerprint = secrets::vapid_key_fingerprint(&key);
    info!("push: Web Push enabled (public key at GET /api/v1/push/vapid-key)");
    let config = WebPushConfig {
        allow_http: args.test_mode,
        ..WebPushConfig::new(key, subject)
    };
    Ok((Some(config), Some(fingerprint)))
}

/// FCM when `--fcm-credentials` is given: the service account, with the endpoint and token
/// URL from the flags (or the key file), each checked by [`push_service_url`].
fn fcm_config(args: &Args) -> Result<Option<FcmConfig>> {
    let Some(path) = &args.fcm_credentials else {
        return Ok(None);
    };
    let test_mode = args.test_mode;
    let account = ServiceAccount::load(path)
        .with_context(|| format!("--fcm-credentials {}", path.display()))?;
    let mut fcm = FcmConfig::new(account);
    if let Some(url) = &args.fcm_endpoint {
        fcm.endpoint = url.clone();
    }
    if let Some(url) = &args.fcm_token_url {
        fcm.token_url = url.clone();
    }
    fcm.endpoint = push_service_url("--fcm-endpoint", &fcm.endpoint, test_mode)?;
    fcm.token_url = push_service_url(
        "the FCM token URL (--fcm-token-url or the key file's token_uri)",
        &fcm.token_url,
        test_mode,
    )?;
    info!(project = fcm.account.project_id(), "push: FCM enabled");
    Ok(Some(fcm))
}

/// APNs when `--apns-key` is given: the key with its id, team and topic, and the endpoint
/// from `--apns-endpoint` (or the default), checked by [`push_service_url`].
fn apns_config(args: &Args) -> Result<Option<ApnsConfig>> {
    let Some(path) = &args.apns_key else {
        return Ok(None);
    };
    let field = |v: &Option<String>| v.clone().unwrap_or_default();
    let mut apns = ApnsConfig::load(
        path,
        &field(&args.apns_key_id),
        &field(&args.apns_team_id),
        &field(&args.apns_topic),
    )
    .with_context(|| format!("--apns-key {}", path.display()))?;
    if let Some(url) = &args.apns_endpoint {
        apns = apns.with_endpoint(url);
    }
    let endpoint = push_service_url("--apns-endpoint", &apns.endpoint, args.test_mode)?;
    apns = apns.with_endpoint(&endpoint);
    info!(topic = %apns.topic, "push: APNs enabled");
    Ok(Some(apns))
}

/// The VAPID key: `--vapid-key FILE`, else DIR/vapid.pem (`--data` or `--secrets-dir`; created
/// on first start, replaced with `--rotate-vapid-key`), else (with `--memory`) a key for this
/// process only.
fn vapid_key(args: &Args, key_dir: Option<&Path>) -> Result<VapidKey> {
    if let Some(path) = &args.vapid_key {
        let key = VapidKey::load(path).context("--vapid-key")?;
        info!(file = %path.display(), "push: VAPID key loaded");
        if args.rotate_vapid_key {
            warn!(
                file = %path.display(),
                "--rotate-vapid-key: this file is taken as the new VAPID key; browsers subscribed \
                 under the old key get no pushes until they subscribe again"
            );
        }
        return Ok(key);
    }
    let mut rng = ChaCha20Rng::from_seed(os_bytes()?);
    match key_dir {
        Some(dir) if args.rotate_vapid_key => {
            let path = dir.join(VAPID_KEY_FILE);
            let key = secrets::rotate_vapid_key(&path, &mut rng)?;
            warn!(
                file = %path.display(),
                "--rotate-vapid-key: a new VAPID key (mode 0600); browsers subscribed under the \
                 old key get no pushes until they subscribe again"
            );
            Ok(key)
        }
        Some(dir) => {
            let path = dir.join(VAPID_KEY_FILE);
            let (key, created) =
                VapidKey::load_or_create(&path, &mut rng).context("the VAPID key file")?;
            if created {
                info!(file = %path.display(), "push: new VAPID key written (mode 0600); back it up with the data: browsers subscribed under it");
            } else {
                info!(file = %path.display(), "push: VAPID key loaded");
            }
            Ok(key)
        }
        None => {
            warn!(
                "--memory without --vapid-key: a VAPID key for this process only; browser \
                 subscriptions made under it get no pushes after a restart"
            );
            Ok(VapidKey::generate(&mut rng))
        }
    }
}

/// The push destination policy from the flags: test mode accepts `http://` and any address
/// (stand-ins); otherwise `https://` to public addresses, `--push-allow-private` for a lab,
/// and `--push-allow-host` (plus the configured FCM and APNs hosts) as an allowlist.
fn push_destinations(
    args: &Args,
    fcm: Option<&FcmConfig>,
    apns: Option<&ApnsConfig>,
) -> Result<relay_core::destination::PushDestinations> {
    use relay_core::destination::PushDestinations;
    if args.test_mode {
        return Ok(PushDestinations::permissive());
    }
    let mut allowed_hosts: Vec<String> = Vec::new();
    for host in &args.push_allow_host {
        let host = host.trim().trim_end_matches('.').to_ascii_lowercase();
        let name = host.strip_prefix("*.").unwrap_or(&host);
        match relay_core::destination::parse_host(name) {
            Ok(relay_core::destination::Host::Name(_)) => allowed_hosts.push(host),
            _ => bail!("--push-allow-host {host}: expected a host name or *.suffix"),
        }
    }
    if !allowed_hosts.is_empty() {
        let configured = fcm
            .into_iter()
            .flat_map(|f| [f.endpoint.as_str(), f.token_url.as_str()])
            .chain(apns.map(|a| a.endpoint.as_str()));
        for url in configured {
            if let Some(host) = url
                .parse::<http::Uri>()
                .ok()
                .and_then(|u| u.host().map(str::to_ascii_lowercase))
            {
                allowed_hosts.push(host);
            }
        }
    }
    Ok(PushDestinations {
        allow_http: false,
        allow_private: args.push_allow_private,
        allowed_hosts,
    })
}

/// `url` without a trailing `/`, refused unless `https://` with a host (`http://` too in test
/// mode, for stand-ins).
pub(crate) fn push_service_url(what: &str, url: &str, test_mode: bool) -> Result<String> {
    let uri: http::Uri = url.parse().with_context(|| format!("{what}: not a URL"))?;
    let scheme_ok = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => test_mode,
        _ => false,
    };
    if !scheme_ok || uri.host().is_none_or(str::is_empty) {
        bail!(
            "{what} must be an https:// URL{}",
            if test_mode {
                " (or http:// in test mode)"
            } else {
                ""
            }
        );
    }
    Ok(url.trim_end_matches('/').to_owned())
}
