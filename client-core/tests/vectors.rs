//! Every value of `shared/vectors/reference-client.json` and PROTOCOL §8.2, reproduced or accepted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use client_core::encoding::{from_base64, from_hex, to_base64, to_hex};
use client_core::keys::{
    X25519Path, compute_security_code, derive_identity, mnemonic_to_seed, validate_mnemonic_words,
    verify_challenge_signature,
};
use client_core::pow::{pow_is_solved, solve_pow};
use serde_json::Value;

const VECTORS: &str = include_str!("../../../shared/vectors/reference-client.json");

fn vectors() -> Value {
    serde_json::from_str(VECTORS).unwrap()
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v[k].as_str().unwrap_or_else(|| panic!("missing {k}"))
}

fn arr32(v: &[u8]) -> [u8; 32] {
    v.try_into().unwrap()
}

#[test]
fn identities_both_paths_and_challenge_signature() {
    let v = vectors();
    for idv in v["identities"].as_array().unwrap() {
        let m = s(idv, "mnemonic");
        assert!(validate_mnemonic_words(m));
        assert_eq!(to_hex(&mnemonic_to_seed(m).unwrap()), s(idv, "seed_hex"));
        let spec = derive_identity(m, X25519Path::Spec).unwrap();
        let web = derive_identity(m, X25519Path::WebSdk).unwrap();
        for id in [&spec, &web] {
            assert_eq!(
                to_hex(&id.signing_key.private_bytes()),
                s(idv, "ed25519_private_hex")
            );
            assert_eq!(id.signing_public_b64(), s(idv, "ed25519_public_b64"));
        }
        assert_eq!(s(idv, "x25519_spec_path"), "m/44'/1'/0'/0'/0'");
        assert_eq!(s(idv, "x25519_web_sdk_path"), "m/44'/1'/0'/0'/1'");
        assert_eq!(
            to_hex(&spec.ecdh_key.private_bytes()),
            s(idv, "x25519_spec_private_hex")
        );
        assert_eq!(spec.ecdh_public_b64(), s(idv, "x25519_spec_public_b64"));
        assert_eq!(
            to_hex(&web.ecdh_key.private_bytes()),
            s(idv, "x25519_web_sdk_private_hex")
        );
        assert_eq!(web.ecdh_public_b64(), s(idv, "x25519_web_sdk_public_b64"));
        // Ed25519 is deterministic: our signature equals the reference's byte for byte.
        let ch = s(idv, "challenge");
        assert_eq!(spec.sign_challenge(ch), s(idv, "challenge_signature_b64"));
        verify_challenge_signature(
            &spec.signing_public_b64(),
            ch,
            s(idv, "challenge_signature_b64"),
        )
        .unwrap();
        assert!(
            verify_challenge_signature(
                &spec.signing_public_b64(),
                "other",
                s(idv, "challenge_signature_b64")
            )
            .is_err()
        );
    }
}

#[test]
fn pow_first_nonces() {
    let v = vectors();
    for p in v["pow"].as_array().unwrap() {
        let d = u32::try_from(p["difficulty"].as_u64().unwrap()).unwrap();
        let nonce = solve_pow(s(p, "challenge"), d).unwrap();
        assert_eq!(nonce, s(p, "first_nonce"));
        assert!(pow_is_solved(s(p, "challenge"), &nonce, d));
    }
}

/// The spec requires exactly 12 words; the reference accepts longer valid phrases (24 words).
#[test]
fn mnemonic_validation_cases() {
    let v = vectors();
    for c in v["mnemonic_validation"].as_array().unwrap() {
        let input = s(c, "input");
        let reference = c["reference_valid"].as_bool().unwrap();
        let ours = validate_mnemonic_words(input);
        let words = input.split_whitespace().count();
        if words == 24 {
            assert!(reference, "the reference accepts the 24-word case");
            assert!(!ours, "we deliberately reject non-12-word phrases");
        } else {
            assert_eq!(ours, reference, "{input:?}");
        }
    }
    // Protocol §8.1 invalid inputs.
    for bad in [
        "invalid mnemonic words",
        "abandon abandon",
        "abandon abandon abandon",
        "hello world foo bar baz qux quux corge grault garply waldo fred",
        "abandon  abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about",
        "abandon\tabandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about",
    ] {
        assert!(!validate_mnemonic_words(bad), "{bad:?}");
    }
}

#[test]
fn pair_security_codes() {
    let v = vectors();
    for p in v["pairs"].as_array().unwrap() {
        let a = derive_identity(s(p, "a_mnemonic"), X25519Path::WebSdk).unwrap();
        assert_eq!(
            to_hex(&a.ecdh_key.private_bytes()),
            s(p, "a_x25519_private_hex")
        );
        let b_pub = arr32(&from_base64(s(p, "b_x25519_public_b64")).unwrap());
        let b = derive_identity(s(p, "b_mnemonic"), X25519Path::WebSdk).unwrap();
        assert_eq!(b.ecdh_key.public_key(), b_pub);
        let shared = a.ecdh_key.diffie_hellman(&b_pub);
        assert_eq!(to_hex(&shared), s(p, "shared_secret_hex"));
        assert_eq!(b.ecdh_key.diffie_hellman(&a.ecdh_key.public_key()), shared);
        let code = compute_security_code(&a.ecdh_key.public_key(), &b_pub);
        assert_eq!(code, s(p, "security_code"));
        assert_eq!(
            compute_security_code(&b_pub, &a.ecdh_key.public_key()),
            code
        );
    }
}

#[test]
fn protocol_8_2_security_codes() {
    let ones = [1u8; 32];
    let twos = [2u8; 32];
    assert_eq!(
        compute_security_code(&ones, &twos),
        "f818afd37a6dc3bc92fb44731011277006db4efa6e9023cd7468c02335d2"
    );
    let mut a = [0u8; 32];
    let mut b = [0u8; 32];
    for i in 0..32u8 {
        a[usize::from(i)] = i;
        b[usize::from(i)] = i + 100;
    }
    assert_eq!(
        compute_security_code(&b, &a),
        "bd2a1f6a1c7be24cd4a6ddb5d2094bd7dd2e0f8ea1c7c069c33e4505f523"
    );
    assert_eq!(
        compute_security_code(&[3u8; 32], &[4u8; 32]),
        "505a9c6ac70bdffa46248e2025483f9fe997a0e31ed25559e448b73b7e02"
    );
}

#[test]
fn protocol_8_2_keys() {
    let a = derive_identity(
        "abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about",
        X25519Path::WebSdk,
    )
    .unwrap();
    assert_eq!(
        to_base64(
            &from_hex("7c2e79f3a1701fb2a86a2c24a3fdf8634b7aad80886c0c0a526d44d23fe8e19a").unwrap()
        ),
        a.signing_public_b64()
    );
    assert_eq!(
        a.sign_challenge("abc123_challenge_nonce"),
        "tvFe+IFSHtDSWlWGz8q1PxrrVsSQRydl9MGyf0LkAHzSe0cC4n2B5Hptj1dupVnYCojU+2u7qMVsz0/axsA8DQ=="
    );
    let b = derive_identity(
        "legal winner thank year wave sausage worth useful legal winner thank yellow",
        X25519Path::Spec,
    )
    .unwrap();
    assert_eq!(
        to_hex(&b.ecdh_key.public_key()),
        "3fbbe8688bb7e77b8c34cddfa916ada774deed62891ca0947ee7193c9761f866"
    );
}

mod crypto_vectors {
    use super::*;
    use client_core::crypto::content::MessageContent;
    use client_core::crypto::json::canonical_web;
    use client_core::crypto::signal::{
        NonceCache, SignalEnvelope, SignalError, SignatureCoverage, open_signal,
    };
    use client_core::crypto::{SessionKey, decrypt_payload_text, session_key};

    fn pair_key(p: &Value) -> SessionKey {
        let a = derive_identity(s(p, "a_mnemonic"), X25519Path::WebSdk).unwrap();
        let b_pub = arr32(&from_base64(s(p, "b_x25519_public_b64")).unwrap());
        let k = session_key(&a.ecdh_key, &b_pub, s(p, "conversation_id"));
        // both sides derive the same key
        let b = derive_identity(s(p, "b_mnemonic"), X25519Path::WebSdk).unwrap();
        assert_eq!(
            session_key(
                &b.ecdh_key,
                &a.ecdh_key.public_key(),
                s(p, "conversation_id")
            ),
            k
        );
        k
    }

    #[test]
    fn pairs_session_keys_and_every_message() {
        let v = vectors();
        for p in v["pairs"].as_array().unwrap() {
            let k = pair_key(p);
            assert_eq!(to_hex(k.as_bytes()), s(p, "session_key_hex"));
            let display = client_core::security::display_code(s(p, "security_code"));
            assert_eq!(display, s(p, "security_display_code"));
            for m in p["messages"].as_array().unwrap() {
                let text = decrypt_payload_text(&k, s(m, "payload_b64")).unwrap();
                assert_eq!(text, s(m, "plaintext"));
                // every reference plaintext parses into some content without loss
                let c = MessageContent::parse(&text);
                if text.starts_with("{\"text\"") {
                    assert!(matches!(c, MessageContent::Reply { .. }));
                    assert_eq!(c.encode(), text);
                }
                if text.starts_with("[file]") || text.starts_with("[voice]") {
                    assert!(matches!(c, MessageContent::Media(_)));
                    assert_eq!(c.encode(), text);
                }
            }
        }
    }

    #[test]
    fn reference_signals_verify_at_their_ts() {
        let v = vectors();
        let pairs = v["pairs"].as_array().unwrap();
        for sg in v["signals"].as_array().unwrap() {
            let signed = sg["signed"].as_object().unwrap();
            let mut unsigned = signed.clone();
            unsigned.remove("_sig");
            assert_eq!(canonical_web(&unsigned), s(sg, "canonical_signed_string"));
            let p = pairs
                .iter()
                .find(|p| s(p, "conversation_id") == s(sg, "conversation_id"))
                .unwrap();
            let key = pair_key(p);
            let signer = derive_identity(s(sg, "signer_mnemonic"), X25519Path::WebSdk).unwrap();
            let pk = signer.signing_key.public_key();
            let ts = signed["_ts"].as_u64().unwrap();
            let env = SignalEnvelope {
                frame_type: signed["type"].as_str().unwrap(),
                from: signed["from"].as_str().unwrap(),
                call_id: signed["call_id"].as_str().unwrap(),
            };
            let mut cache = NonceCache::new();
            let payload = s(sg, "encrypted_payload_b64");
            let ok = open_signal(&key, payload, env, Some(&pk), ts, &mut cache).unwrap();
            assert_eq!(ok.ts_ms, ts);
            assert_eq!(ok.fields["type"], signed["type"]);
            if env.frame_type == "call_ice" {
                assert_eq!(
                    ok.coverage,
                    SignatureCoverage::WebCanonicalOnly {
                        unsigned_fields: vec![
                            "candidate.sdpMLineIndex".into(),
                            "candidate.sdpMid".into()
                        ]
                    }
                );
            } else {
                assert_eq!(ok.coverage, SignatureCoverage::Full);
            }
            // replay of the same nonce is refused; so are stale/future timestamps
            assert_eq!(
                open_signal(&key, payload, env, Some(&pk), ts, &mut cache),
                Err(SignalError::ReplayedNonce)
            );
            let mut fresh = NonceCache::new();
            assert_eq!(
                open_signal(&key, payload, env, Some(&pk), ts + 60_001, &mut fresh),
                Err(SignalError::Stale)
            );
            assert!(open_signal(&key, payload, env, Some(&pk), ts + 60_000, &mut fresh).is_ok());
            let mut fresh = NonceCache::new();
            assert_eq!(
                open_signal(&key, payload, env, None, ts, &mut fresh),
                Err(SignalError::NoPeerKey)
            );
            let other = derive_identity(s(p, "b_mnemonic"), X25519Path::WebSdk).unwrap();
            assert_eq!(
                open_signal(
                    &key,
                    payload,
                    env,
                    Some(&other.signing_key.public_key()),
                    ts,
                    &mut fresh
                ),
                Err(SignalError::BadSignature)
            );
            let wrong_from = SignalEnvelope {
                from: "u99999999",
                ..env
            };
            assert_eq!(
                open_signal(&key, payload, wrong_from, Some(&pk), ts, &mut fresh),
                Err(SignalError::FromMismatch)
            );
            let wrong_call = SignalEnvelope {
                call_id: "call-x",
                ..env
            };
            assert_eq!(
                open_signal(&key, payload, wrong_call, Some(&pk), ts, &mut fresh),
                Err(SignalError::CallIdMismatch)
            );
            let wrong_type = SignalEnvelope {
                frame_type: "call_reject",
                ..env
            };
            assert_eq!(
                open_signal(&key, payload, wrong_type, Some(&pk), ts, &mut fresh),
                Err(SignalError::TypeMismatch)
            );
            // failures did not record the nonce
            assert!(fresh.is_empty());
        }
    }

    #[test]
    fn protocol_8_2_flat_signal_signature() {
        let a = derive_identity(
            "abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about",
            X25519Path::Spec,
        )
        .unwrap();
        let inner = serde_json::json!({"call_id":"11111111-2222-3333-4444-555555555555","from":"u12345678","type":"call_hangup","_ts":1700000000000u64,"_nonce":"00112233445566778899aabbccddeeff"});
        let c = canonical_web(inner.as_object().unwrap());
        assert_eq!(
            c,
            r#"{"_nonce":"00112233445566778899aabbccddeeff","_ts":1700000000000,"call_id":"11111111-2222-3333-4444-555555555555","from":"u12345678","type":"call_hangup"}"#
        );
        assert_eq!(
            to_hex(&a.signing_key.sign(c.as_bytes())),
            "cfcdd221c9efb0aa1fc2044f07fb7920f61953d722991c91cc2be7e263ceb3957470b249767b75195bbdf328e0dcec6c24fcf9d478592c8c949b1ce014cd4702"
        );
    }
}
