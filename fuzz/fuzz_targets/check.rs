//! The property of the `decode_frames` fuzz target, shared (via `#[path]`) with the stable corpus
//! replay `wire/tests/fuzz_corpus.rs`.
//!
//! For any bytes: `ClientFrame::decode_bytes` and (when UTF-8) `ServerFrame::decode` never panic,
//! and a decoded frame re-encodes to text that decodes again to an equal frame. Two documented
//! exceptions:
//! - re-encoding may exceed `MAX_FRAME_BYTES` for an unknown frame (numbers such as `1e5` render
//!   as `100000.0`) or a goaway (the reason is written twice); such text is rejected as too large;
//! - serde_json (without its `float_roundtrip` feature) may parse a 17-digit float one ulp off,
//!   so floats inside unknown frames are compared with a relative tolerance of a few ulps.

use serde_json::Value;
use wire::limits::MAX_FRAME_BYTES;
use wire::{ClientFrame, FrameError, ServerFrame};

/// Runs the property on one input; panics on a violation.
pub(crate) fn check(data: &[u8]) {
    let client = ClientFrame::decode_bytes(data);
    if let Ok(text) = std::str::from_utf8(data) {
        assert_eq!(
            ClientFrame::decode(text),
            client,
            "decode and decode_bytes disagree"
        );
        check_server(text);
    }
    match client {
        Ok(frame) => check_client(&frame),
        Err(e) => error_is_well_formed(&e),
    }
}

fn check_client(frame: &ClientFrame) {
    let text = frame.encode();
    if text.len() > MAX_FRAME_BYTES {
        assert!(matches!(frame, ClientFrame::Unknown(_)), "{frame:?} grew");
        assert!(matches!(
            ClientFrame::decode(&text),
            Err(FrameError::TooLarge { .. })
        ));
        return;
    }
    let again = ClientFrame::decode(&text)
        .unwrap_or_else(|e| panic!("re-encoded client frame does not decode: {e}\n{text}"));
    assert_eq!(again.frame_type(), frame.frame_type());
    match (&again, frame) {
        (ClientFrame::Unknown(a), ClientFrame::Unknown(b)) => assert!(
            same_object(&a.raw, &b.raw),
            "unknown client frame changed: {again:?} != {frame:?}"
        ),
        _ => {
            assert_eq!(&again, frame, "client frame changed through {text}");
            assert_eq!(again.encode(), text, "client frame encoding is not stable");
        }
    }
}

fn check_server(text: &str) {
    let frame = match ServerFrame::decode(text) {
        Ok(frame) => frame,
        Err(e) => return error_is_well_formed(&e),
    };
    let text = frame.encode();
    if text.len() > MAX_FRAME_BYTES {
        assert!(
            matches!(frame, ServerFrame::Unknown(_) | ServerFrame::Goaway(_)),
            "{frame:?} grew"
        );
        assert!(matches!(
            ServerFrame::decode(&text),
            Err(FrameError::TooLarge { .. })
        ));
        return;
    }
    let again = ServerFrame::decode(&text)
        .unwrap_or_else(|e| panic!("re-encoded server frame does not decode: {e}\n{text}"));
    assert_eq!(again.frame_type(), frame.frame_type());
    match (&again, &frame) {
        (ServerFrame::Unknown(a), ServerFrame::Unknown(b)) => assert!(
            same_object(&a.raw, &b.raw),
            "unknown server frame changed: {again:?} != {frame:?}"
        ),
        _ => {
            assert_eq!(again, frame, "server frame changed through {text}");
            assert_eq!(again.encode(), text, "server frame encoding is not stable");
        }
    }
}

fn error_is_well_formed(e: &FrameError) {
    let code = e.code();
    assert!(!code.as_str().is_empty());
    assert!(!e.to_string().is_empty());
    if let FrameError::Invalid { frame_type, .. } | FrameError::PayloadTooLarge { frame_type, .. } =
        e
    {
        assert_eq!(e.frame_type(), Some(frame_type.as_str()));
    }
}

fn same_object(a: &serde_json::Map<String, Value>, b: &serde_json::Map<String, Value>) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b.iter())
            .all(|((ka, va), (kb, vb))| ka == kb && same_value(va, vb))
}

fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            match (x.as_f64(), y.as_f64()) {
                (Some(x), Some(y)) => {
                    x == y || (x - y).abs() <= 4.0 * f64::EPSILON * x.abs().max(y.abs())
                }
                _ => false,
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_value(x, y))
        }
        (Value::Object(x), Value::Object(y)) => same_object(x, y),
        _ => a == b,
    }
}
