//! Timestamps.
//!
//! Frames carry Unix epoch **milliseconds** as JSON numbers (`at`, `_ts`); REST bodies carry
//! ISO-8601 strings (`created_at`, `expired_at`, `expires_at`). Both are the same [`UnixMs`] inside;
//! [`IsoTime`] is the string form. The relay never reads a clock: it formats the `now` it was given.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Milliseconds since the Unix epoch.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct UnixMs(pub u64);

impl UnixMs {
    /// The raw number of milliseconds.
    pub fn get(self) -> u64 {
        self.0
    }

    /// This instant plus `ms` milliseconds (saturating).
    #[must_use]
    pub fn plus_ms(self, ms: u64) -> Self {
        Self(self.0.saturating_add(ms))
    }

    /// Milliseconds from `earlier` to `self`, or 0 if `earlier` is later.
    pub fn since(self, earlier: Self) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Debug for UnixMs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UnixMs({})", self.0)
    }
}

/// An instant rendered as an ISO-8601 / RFC 3339 UTC string with millisecond precision,
/// for example `2026-11-21T22:34:59.123Z`.
///
/// Decoding accepts any RFC 3339 string (any offset, any sub-second precision) and also a JSON
/// number of epoch milliseconds, which is how the Android SDK types vanity `expired_at`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct IsoTime(pub UnixMs);

/// 9999-12-31T23:59:59.999Z, the last instant [`IsoTime::render`] can write.
const MAX_RENDERABLE_MS: u64 = 253_402_300_799_999;

/// Why a timestamp string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an RFC 3339 timestamp after 1970: {reason}")]
pub struct TimeError {
    reason: String,
}

impl IsoTime {
    /// Wraps epoch milliseconds.
    pub fn from_ms(ms: u64) -> Self {
        Self(UnixMs(ms))
    }

    /// Epoch milliseconds.
    pub fn ms(self) -> u64 {
        self.0.0
    }

    /// Parses an RFC 3339 string.
    pub fn parse(value: &str) -> Result<Self, TimeError> {
        let dt = OffsetDateTime::parse(value, &Rfc3339).map_err(|e| TimeError {
            reason: e.to_string(),
        })?;
        let ms = dt.unix_timestamp_nanos() / 1_000_000;
        u64::try_from(ms).map(Self::from_ms).map_err(|_| TimeError {
            reason: "before 1970".into(),
        })
    }

    /// Renders `YYYY-MM-DDTHH:MM:SS.mmmZ`.
    pub fn render(self) -> String {
        let ms = i128::from(self.ms());
        match OffsetDateTime::from_unix_timestamp_nanos(ms * 1_000_000) {
            Ok(dt) => format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
                dt.year(),
                u8::from(dt.month()),
                dt.day(),
                dt.hour(),
                dt.minute(),
                dt.second(),
                dt.millisecond()
            ),
            // Beyond year 9999: cannot come from a real clock; render the largest valid instant.
            Err(_) => "9999-12-31T23:59:59.999Z".to_owned(),
        }
    }
}

impl fmt::Debug for IsoTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IsoTime({})", self.render())
    }
}

impl fmt::Display for IsoTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render())
    }
}

impl Serialize for IsoTime {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.render())
    }
}

impl<'de> Deserialize<'de> for IsoTime {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw<'a> {
            Ms(u64),
            #[serde(borrow)]
            Text(std::borrow::Cow<'a, str>),
        }
        match Raw::deserialize(d)? {
            // Beyond year 9999 cannot be rendered back (see `render`): reject rather than clamp.
            Raw::Ms(ms) if ms > MAX_RENDERABLE_MS => Err(serde::de::Error::custom(
                "epoch milliseconds beyond 9999-12-31T23:59:59.999Z",
            )),
            Raw::Ms(ms) => Ok(Self::from_ms(ms)),
            Raw::Text(text) => Self::parse(&text).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_and_parses_millisecond_utc() {
        let t = IsoTime::from_ms(1_795_297_776_370);
        assert_eq!(t.render(), "2026-11-21T21:49:36.370Z");
        assert_eq!(IsoTime::parse(&t.render()).unwrap(), t);
        assert_eq!(IsoTime::from_ms(0).render(), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn accepts_offsets_and_epoch_numbers() {
        let a: IsoTime = serde_json::from_str("\"2026-11-21T22:49:36.370+01:00\"").unwrap();
        let b: IsoTime = serde_json::from_str("1795297776370").unwrap();
        assert_eq!(a, b);
        assert!(serde_json::from_str::<IsoTime>("\"yesterday\"").is_err());
        assert!(serde_json::from_str::<IsoTime>("\"1969-12-31T23:59:59Z\"").is_err());
        let last: IsoTime = serde_json::from_str("253402300799999").unwrap();
        assert_eq!(last.render(), "9999-12-31T23:59:59.999Z");
        assert!(serde_json::from_str::<IsoTime>("253402300800000").is_err());
    }
}
