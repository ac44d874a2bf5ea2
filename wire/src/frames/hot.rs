//! The direct decode of the frames every message costs (see [`ClientFrame::decode`]).

use serde::Deserialize;

use super::{ClientFrame, MsgFrame};
use crate::limits::{MAX_FRAME_BYTES, MAX_MSG_PAYLOAD_BYTES};

impl ClientFrame {
    /// The frames every message costs (`msg`, `delivered`, `read`) decoded straight from the
    /// text into their types, without the intermediate JSON tree of `decode_general`.
    /// `None` for anything else and for anything it does not accept (a malformed field, a
    /// duplicated key, an oversized payload): the general path then gives the same frame or the
    /// error the peer is owed.
    pub(super) fn decode_hot(text: &str) -> Option<Self> {
        #[derive(Deserialize)]
        struct Tag<'a> {
            #[serde(rename = "type", borrow)]
            frame_type: std::borrow::Cow<'a, str>,
        }
        if text.len() > MAX_FRAME_BYTES {
            return None;
        }
        let tag: Tag<'_> = serde_json::from_str(text).ok()?;
        match &*tag.frame_type {
            "msg" => serde_json::from_str::<MsgFrame>(text)
                .ok()
                .filter(|m| m.payload.len() <= MAX_MSG_PAYLOAD_BYTES)
                .map(Self::Msg),
            "delivered" => serde_json::from_str(text).ok().map(Self::Delivered),
            "read" => serde_json::from_str(text).ok().map(Self::Read),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::ClientFrame;

    /// A JSON value for a field, of the right shape or not.
    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("\"c-1\"".to_owned()),
            Just("\"u12345678\"".to_owned()),
            Just("\"m\\u002d1\"".to_owned()),
            Just("\"a b\"".to_owned()),
            Just("\"\"".to_owned()),
            Just("7".to_owned()),
            Just("-1".to_owned()),
            Just("1.5".to_owned()),
            Just("null".to_owned()),
            Just("{}".to_owned()),
            Just("[1]".to_owned()),
            (0usize..70_000).prop_map(|n| format!("\"{}\"", "A".repeat(n))),
        ]
    }

    /// An object with a `type` and a random choice of fields (repeats allowed).
    fn frame_text() -> impl Strategy<Value = String> {
        let ty = prop_oneof![
            Just("\"msg\""),
            Just("\"delivered\""),
            Just("\"read\""),
            Just("\"typing\""),
            Just("\"m\\u0073g\""),
            Just("1"),
        ];
        let key = prop_oneof![
            Just("id"),
            Just("to"),
            Just("conv_id"),
            Just("seq"),
            Just("crypto_v"),
            Just("payload"),
            Just("type"),
            Just("extra"),
        ];
        (ty, prop::collection::vec((key, value()), 0..9)).prop_map(|(ty, fields)| {
            let mut parts = vec![format!("\"type\":{ty}")];
            parts.extend(fields.into_iter().map(|(k, v)| format!("\"{k}\":{v}")));
            format!("{{{}}}", parts.join(","))
        })
    }

    /// A well-formed hot frame, so that the fast path is exercised, not only refused.
    fn hot_text() -> impl Strategy<Value = String> {
        (prop::bool::ANY, 1u64..1_000, "[A-Za-z0-9+/=]{0,64}").prop_map(|(msg, seq, payload)| {
            if msg {
                format!(
                    r#"{{"type":"msg","id":"m-{seq}","to":"u1234","conv_id":"c-1","crypto_v":1,"payload":"{payload}"}}"#
                )
            } else {
                format!(r#"{{"type":"read","conv_id":"c-1","seq":{seq},"to":"u1234"}}"#)
            }
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn the_hot_path_decodes_exactly_what_the_general_path_decodes(
            text in prop_oneof![frame_text(), hot_text()]
        ) {
            if let Some(hot) = ClientFrame::decode_hot(&text) {
                prop_assert_eq!(Ok(hot), ClientFrame::decode_general(&text));
            }
        }
    }

    #[test]
    fn the_hot_path_takes_well_formed_messages_and_receipts() {
        let msg = r#"{"type":"msg","id":"m-1","to":"u1234","conv_id":"c-1","crypto_v":1,"payload":"QUJD"}"#;
        let read = r#"{"type":"read","conv_id":"c-1","seq":3,"to":"u1234"}"#;
        for text in [msg, read] {
            assert!(ClientFrame::decode_hot(text).is_some(), "{text}");
        }
        let dup = r#"{"type":"read","conv_id":"c-1","seq":3,"seq":4,"to":"u1234"}"#;
        assert!(ClientFrame::decode_hot(dup).is_none());
        assert!(
            ClientFrame::decode(dup).is_ok(),
            "the general path keeps the last value"
        );
    }
}
