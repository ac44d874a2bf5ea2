//! What crosses between nodes: a [`Crossing`] as one JSON text, `{"v":1,"crossing":{…}}`.
//!
//! Inside one process the cores hand each other [`Crossing`] values; between the nodes of a
//! cluster the shell sends this text. Its shape is the crossing types' serde form (externally
//! tagged enums, fields by name; bodies in standard base64; a signal's frame as its wire text),
//! frozen by snapshot tests, so that nodes of two builds in a rolling upgrade agree, and
//! versioned by `v`: a node refuses an envelope of another version ([`EnvelopeError::Version`])
//! rather than guess at it. A lost or refused envelope is a crossing lost on the way, which
//! the hand-off protocol is built for (what must arrive is sent again).
//!
//! Decoding never panics and its errors quote nothing of the text (it may hold tokens,
//! payloads or bodies): a size, a version, or where and what kind of syntax error.

use super::Crossing;

/// The envelope version this build writes and reads.
pub const ENVELOPE_VERSION: u32 = 1;

/// Largest envelope read: a forwarded request with a whole media part (its body in base64,
/// four bytes for every three) and room for the rest.
pub const MAX_ENVELOPE_BYTES: usize = wire::limits::MAX_MEDIA_PART_BYTES / 3 * 4 + 64 * 1024;

/// Why an envelope was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// Longer than [`MAX_ENVELOPE_BYTES`].
    #[error("crossing envelope of {bytes} bytes, over the limit of {MAX_ENVELOPE_BYTES}")]
    TooLarge {
        /// Its length.
        bytes: usize,
    },
    /// Written by a build of another envelope version.
    #[error("crossing envelope version {found}, this build reads {ENVELOPE_VERSION}")]
    Version {
        /// The version it says.
        found: u64,
    },
    /// Not an envelope of this version: the kind of error and where (nothing of the text).
    #[error("malformed crossing envelope: {kind} error at line {line} column {column}")]
    Malformed {
        /// `syntax`, `data` (a field of the wrong shape) or `eof` (cut short).
        kind: &'static str,
        /// Where.
        line: usize,
        /// Where.
        column: usize,
    },
}

#[derive(serde::Serialize)]
struct Outgoing<'a> {
    v: u32,
    crossing: &'a Crossing,
}

#[derive(serde::Deserialize)]
struct Incoming {
    v: u64,
    crossing: Crossing,
}

#[derive(serde::Deserialize)]
struct VersionOnly {
    v: u64,
}

/// `c` as an envelope.
pub fn encode(c: &Crossing) -> String {
    let out = Outgoing {
        v: ENVELOPE_VERSION,
        crossing: c,
    };
    // Every crossing type serializes (no map with non-string keys, no failing field).
    serde_json::to_string(&out).unwrap_or_default()
}

/// The crossing an envelope carries.
pub fn decode(text: &str) -> Result<Crossing, EnvelopeError> {
    if text.len() > MAX_ENVELOPE_BYTES {
        return Err(EnvelopeError::TooLarge { bytes: text.len() });
    }
    match serde_json::from_str::<Incoming>(text) {
        Ok(Incoming { v, crossing }) if v == u64::from(ENVELOPE_VERSION) => Ok(crossing),
        Ok(Incoming { v, .. }) => Err(EnvelopeError::Version { found: v }),
        Err(e) => match serde_json::from_str::<VersionOnly>(text) {
            Ok(VersionOnly { v }) if v != u64::from(ENVELOPE_VERSION) => {
                Err(EnvelopeError::Version { found: v })
            }
            _ => Err(malformed(&e)),
        },
    }
}

fn malformed(e: &serde_json::Error) -> EnvelopeError {
    use serde_json::error::Category;
    EnvelopeError::Malformed {
        kind: match e.classify() {
            Category::Io => "io",
            Category::Syntax => "syntax",
            Category::Data => "data",
            Category::Eof => "eof",
        },
        line: e.line(),
        column: e.column(),
    }
}

#[cfg(test)]
mod tests;
