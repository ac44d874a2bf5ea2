//! What a push service's answer means for the worker.

use std::time::Duration;

use http::header::RETRY_AFTER;

use crate::transport::PushResponse;

/// The classification of one response (per service: [`crate::webpush::classify`],
/// [`crate::fcm::classify`], [`crate::apns::classify`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Accepted by the push service.
    Delivered,
    /// The target no longer exists (unsubscribed, uninstalled, token invalid): the relay
    /// deletes it.
    Gone,
    /// Transient (429, 5xx, no response): try again after `after` if given, else after the
    /// worker's backoff.
    Retry {
        /// The service's `Retry-After`, if it sent delta-seconds.
        after: Option<Duration>,
    },
    /// Our credential was refused as expired or invalid (FCM 401, APNs
    /// `ExpiredProviderToken`): drop the cached token, make a new one, try again.
    Reauth,
    /// Refused for good (other 4xx): logged with `status` and the service's error code.
    Failed {
        /// The HTTP status.
        status: u16,
        /// The service's error code (letters, digits and `_` only; never a token or URL).
        reason: String,
    },
}

/// `Retry-After` as delta-seconds (an HTTP-date is ignored: the worker's backoff applies).
pub fn retry_after(response: &PushResponse) -> Option<Duration> {
    let value = response.headers.get(RETRY_AFTER)?.to_str().ok()?;
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// `code` reduced to what is safe to log: `[A-Za-z0-9_]`, at most 48 characters.
pub fn safe_code(code: &str) -> String {
    code.chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .take(48)
        .collect()
}

/// The retry outcome for a 429 or 5xx, else `None`.
pub(crate) fn transient(response: &PushResponse) -> Option<Outcome> {
    let status = response.status.as_u16();
    (status == 429 || response.status.is_server_error()).then(|| Outcome::Retry {
        after: retry_after(response),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_seconds_only_and_codes_are_sanitised() {
        let mut r = PushResponse::new(429, "");
        assert_eq!(retry_after(&r), None);
        r.headers.insert(RETRY_AFTER, "7".parse().unwrap());
        assert_eq!(retry_after(&r), Some(Duration::from_secs(7)));
        r.headers.insert(
            RETRY_AFTER,
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&r), None);
        assert_eq!(
            safe_code("Bad Device-Token: https://x/y"),
            "BadDeviceTokenhttpsxy"
        );
        assert_eq!(safe_code(&"A".repeat(100)).len(), 48);
    }
}
