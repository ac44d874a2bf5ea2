//! The client's crypto paths, each next to a `ring` 0.17 baseline in the same run.
//!
//! Naming: one criterion group per path; inside it the function `client-core` (our public API),
//! `relay-core` (the relay's own public API, for JWTs), `rustcrypto` (a mandated crate used
//! directly, for primitives below the API) and `ring` (the baseline doing the same work,
//! same envelope, same base64 and JSON handling).
//!
//! With `--features aws-lc`, client-core seals and opens AES-GCM with aws-lc-rs: its rows are then
//! labelled `client-core[aws-lc]`, and the payload, media chunk and call frame groups gain an
//! `aws-lc-rs` row (the provider alone, same work as the ring row). `--features aws-lc-baseline`
//! adds only the `aws-lc-rs` rows, next to client-core on its default provider.
//!
//! One file, over the usual size: each group holds our row and its baselines side by side, so
//! that what is compared with what is read in one place.
//!
//! Run: `cargo bench -p benches --bench crypto` (a filter narrows it: `-- 'aes256gcm|ed25519'`;
//! `--features aws-lc -- 'payload|call_frame|media_chunk'` for the provider comparison).

use std::collections::{BTreeSet, VecDeque};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use aes_gcm::aead::{AeadInOut as _, KeyInit as _};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use benches::MachineInfo;
use client_core::crypto::{self, SessionKey, call_frame, json, media, signal};
use client_core::encoding::{from_base64, from_hex_array, to_base64, to_hex};
use client_core::keys::{
    self, EcdhKeyPair, SigningKeyPair, X25519Path, compute_security_code, derive_identity,
    verify_challenge_signature,
};
use client_core::pow::{leading_zero_nibbles, solve_pow};
use criterion::{
    BatchSize, BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group,
    criterion_main, measurement::WallTime,
};
use hmac::{Hmac, Mac as _};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng as _;
use ring::{
    aead, agreement, digest, hkdf as rhkdf, hmac as rhmac, pbkdf2, rand as rrand, signature,
};
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256, Sha512};

/// A valid 12-word BIP-39 mnemonic (the all-`abandon` test vector).
const MNEMONIC: &str =
    "abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about";
/// An auth challenge as the relay hands it out (64 ASCII chars, signed as UTF-8 bytes).
const AUTH_CHALLENGE: &str = "3f1c2b7d9e8a4c6f0b5d2e7a9c1f4b8d6e0a3c5f7b9d1e2a4c6f8b0d2e4a6c8f";
const CONVERSATION_ID: &str = "c-7d2f9a41-5b3e-4c8d-9f10-2a6b8c4e1d37";
/// HKDF info of the session key (PROTOCOL §4.3).
const SESSION_KEY_INFO: &[u8] = b"securechat-session-v1";
const PAYLOAD_SIZES: [usize; 2] = [200, 16 * 1024];
const MEDIA_CHUNK_BYTES: usize = 5 * 1024 * 1024;
const CALL_FRAME_BYTES: usize = 1200;
const POW_DIFFICULTY: u32 = 4;
const POW_CHALLENGES: usize = 8;
const IV_BYTES: usize = 12;
const TAG_BYTES: usize = 16;

fn seed(tag: u8) -> [u8; 32] {
    let mut s = [0u8; 32];
    for (i, b) in s.iter_mut().enumerate() {
        *b = tag
            .wrapping_mul(31)
            .wrapping_add(u8::try_from(i).unwrap_or(0));
    }
    s
}

/// Deterministic IVs: a counter in the first 8 bytes (a bench never needs fresh randomness, and a
/// counter never repeats an IV under one key either).
#[derive(Debug, Default)]
struct IvCounter(u64);

impl IvCounter {
    fn next_iv(&mut self) -> [u8; IV_BYTES] {
        self.0 += 1;
        let mut iv = [0u8; IV_BYTES];
        iv[..8].copy_from_slice(&self.0.to_be_bytes());
        iv
    }
}

fn plaintext(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

fn ring_key(key: &[u8; 32]) -> aead::LessSafeKey {
    aead::LessSafeKey::new(
        aead::UnboundKey::new(&aead::AES_256_GCM, key).expect("32-byte AES-256-GCM key"),
    )
}

fn ring_ed25519(seed: &[u8; 32]) -> signature::Ed25519KeyPair {
    signature::Ed25519KeyPair::from_seed_unchecked(seed).expect("32-byte Ed25519 seed")
}

// ---------------------------------------------------------------- Ed25519 (auth challenge)

fn ed25519(c: &mut Criterion) {
    let ours = SigningKeyPair::from_private_bytes(&seed(1));
    let theirs = ring_ed25519(&seed(1));
    let pk_b64 = to_base64(&ours.public_key());
    let sig_b64 = to_base64(&ours.sign(AUTH_CHALLENGE.as_bytes()));

    // Both sides produce / consume the base64 wire form, as the auth exchange does (§1.1.3).
    let mut g = c.benchmark_group("ed25519_sign_challenge");
    g.bench_function("client-core", |b| {
        b.iter(|| to_base64(&ours.sign(black_box(AUTH_CHALLENGE).as_bytes())));
    });
    g.bench_function("ring", |b| {
        b.iter(|| to_base64(theirs.sign(black_box(AUTH_CHALLENGE).as_bytes()).as_ref()));
    });
    g.finish();

    let mut g = c.benchmark_group("ed25519_verify_challenge");
    g.bench_function("client-core", |b| {
        b.iter(|| {
            verify_challenge_signature(black_box(&pk_b64), AUTH_CHALLENGE, black_box(&sig_b64))
                .expect("valid signature");
        });
    });
    g.bench_function("ring", |b| {
        b.iter(|| {
            let pk = from_base64(black_box(&pk_b64)).expect("base64 key");
            let sig = from_base64(black_box(&sig_b64)).expect("base64 signature");
            signature::UnparsedPublicKey::new(&signature::ED25519, pk)
                .verify(AUTH_CHALLENGE.as_bytes(), &sig)
                .expect("valid signature");
        });
    });
    g.finish();
}

// ---------------------------------------------------------------- X25519, HKDF, session key

fn key_agreement(c: &mut Criterion) {
    let rng = rrand::SystemRandom::new();
    let mine = EcdhKeyPair::from_private_bytes(seed(2));
    let their_public = EcdhKeyPair::from_private_bytes(seed(3)).public_key();

    let mut g = c.benchmark_group("x25519_keygen");
    g.bench_function("client-core", |b| {
        b.iter(|| EcdhKeyPair::from_private_bytes(black_box(seed(4))).public_key());
    });
    g.bench_function("ring", |b| {
        b.iter(|| {
            agreement::EphemeralPrivateKey::generate(&agreement::X25519, &rng)
                .expect("system RNG")
                .compute_public_key()
                .expect("X25519 public key")
        });
    });
    g.finish();

    // ring only agrees with ephemeral keys, so its row also draws 32 bytes from the system RNG
    // (`generate` is a getrandom call; it does not compute the public key): well under 1 us.
    let mut g = c.benchmark_group("x25519_agree");
    g.bench_function("client-core", |b| {
        b.iter(|| mine.diffie_hellman(black_box(&their_public)));
    });
    g.bench_function("ring", |b| {
        b.iter(|| ring_agree(&rng, black_box(&their_public)));
    });
    g.finish();

    let shared = mine.diffie_hellman(&their_public);
    let salt = Sha256::digest(CONVERSATION_ID.as_bytes());
    let mut g = c.benchmark_group("hkdf_sha256_32B");
    g.bench_function("rustcrypto", |b| {
        b.iter(|| rc_hkdf(black_box(&shared), &salt));
    });
    g.bench_function("ring", |b| {
        b.iter(|| ring_hkdf(black_box(&shared), &salt));
    });
    g.finish();

    let mut g = c.benchmark_group("session_key");
    g.bench_function("client-core", |b| {
        b.iter(|| crypto::session_key(&mine, black_box(&their_public), black_box(CONVERSATION_ID)));
    });
    g.bench_function("ring", |b| {
        b.iter(|| {
            let shared = ring_agree(&rng, black_box(&their_public));
            let salt = digest::digest(&digest::SHA256, black_box(CONVERSATION_ID).as_bytes());
            ring_hkdf(&shared, salt.as_ref())
        });
    });
    g.finish();
}

fn ring_agree(rng: &rrand::SystemRandom, their_public: &[u8; 32]) -> [u8; 32] {
    let key = agreement::EphemeralPrivateKey::generate(&agreement::X25519, rng).expect("RNG");
    agreement::agree_ephemeral(
        key,
        &agreement::UnparsedPublicKey::new(&agreement::X25519, their_public),
        |s| {
            let mut out = [0u8; 32];
            out.copy_from_slice(s);
            out
        },
    )
    .expect("X25519 agreement")
}

fn rc_hkdf(ikm: &[u8], salt: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    hkdf::Hkdf::<Sha256>::new(Some(salt), ikm)
        .expand(SESSION_KEY_INFO, &mut out)
        .expect("32 bytes is a valid HKDF length");
    out
}

fn ring_hkdf(ikm: &[u8], salt: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    rhkdf::Salt::new(rhkdf::HKDF_SHA256, salt)
        .extract(ikm)
        .expand(&[SESSION_KEY_INFO], rhkdf::HKDF_SHA256)
        .expect("32 bytes is a valid HKDF length")
        .fill(&mut out)
        .expect("output length matches");
    out
}

// ---------------------------------------------------------------- hashes and MACs

fn hashes(c: &mut Criterion) {
    let msg64 = plaintext(64);
    let mut g = c.benchmark_group("sha256_64B");
    g.bench_function("rustcrypto", |b| {
        b.iter(|| Sha256::digest(black_box(&msg64)));
    });
    g.bench_function("ring", |b| {
        b.iter(|| digest::digest(&digest::SHA256, black_box(&msg64)));
    });
    g.finish();

    // One-shot MAC including the key schedule, as a caller with a fresh key does it.
    let key = seed(5);
    let mut g = c.benchmark_group("hmac_sha256_64B");
    g.bench_function("rustcrypto", |b| {
        b.iter(|| {
            let mut m = <Hmac<Sha256>>::new_from_slice(black_box(&key)).expect("any key length");
            m.update(black_box(&msg64));
            m.finalize().into_bytes()
        });
    });
    g.bench_function("ring", |b| {
        b.iter(|| {
            let k = rhmac::Key::new(rhmac::HMAC_SHA256, black_box(&key));
            rhmac::sign(&k, black_box(&msg64))
        });
    });
    g.finish();

    // One SLIP-0010 hardened child step: HMAC-SHA512(chain code, 0x00 ‖ k ‖ index).
    let mut data = vec![0u8];
    data.extend_from_slice(&seed(6));
    data.extend_from_slice(&0x8000_002c_u32.to_be_bytes());
    let mut g = c.benchmark_group("hmac_sha512_slip10_step");
    g.bench_function("rustcrypto", |b| {
        b.iter(|| {
            let mut m = <Hmac<Sha512>>::new_from_slice(black_box(&key)).expect("any key length");
            m.update(black_box(&data));
            m.finalize().into_bytes()
        });
    });
    g.bench_function("ring", |b| {
        b.iter(|| {
            let k = rhmac::Key::new(rhmac::HMAC_SHA512, black_box(&key));
            rhmac::sign(&k, black_box(&data))
        });
    });
    g.finish();
}

// ---------------------------------------------------------------- mnemonic to identity

fn identity(c: &mut Criterion) {
    let mut g = c.benchmark_group("mnemonic_to_identity");
    g.sample_size(20);
    g.bench_function("client-core", |b| {
        b.iter(|| derive_identity(black_box(MNEMONIC), X25519Path::Spec).expect("valid mnemonic"));
    });
    // ring has no X25519 import of a raw private key, so its row stops at the Ed25519 key pair
    // (the X25519 public key is one more fixed-base multiplication, see `x25519_keygen`).
    g.bench_function("ring", |b| {
        b.iter(|| {
            let mut seed = [0u8; 64];
            pbkdf2::derive(
                pbkdf2::PBKDF2_HMAC_SHA512,
                NonZeroU32::new(2048).expect("non-zero"),
                b"mnemonic",
                black_box(MNEMONIC).as_bytes(),
                &mut seed,
            );
            let ed = ring_slip10(&seed, &keys::ED25519_PATH);
            let x = ring_slip10(&seed, &keys::X25519_SPEC_PATH);
            (ring_ed25519(&ed), x)
        });
    });
    g.finish();
}

fn ring_slip10(seed: &[u8], path: &[u32]) -> [u8; 32] {
    let split = |tag: rhmac::Tag| {
        let (mut k, mut c) = ([0u8; 32], [0u8; 32]);
        k.copy_from_slice(&tag.as_ref()[..32]);
        c.copy_from_slice(&tag.as_ref()[32..]);
        (k, c)
    };
    let master = rhmac::Key::new(rhmac::HMAC_SHA512, b"ed25519 seed");
    let (mut k, mut c) = split(rhmac::sign(&master, seed));
    for &index in path {
        let mut ctx = rhmac::Context::with_key(&rhmac::Key::new(rhmac::HMAC_SHA512, &c));
        ctx.update(&[0u8]);
        ctx.update(&k);
        ctx.update(&(index | 0x8000_0000).to_be_bytes());
        (k, c) = split(ctx.sign());
    }
    k
}

// ---------------------------------------------------------------- AES-256-GCM

/// The raw AEAD with the key schedule done once, in place: the crypto crates alone.
fn aes_gcm_raw(c: &mut Criterion) {
    let key = seed(7);
    let ours = Aes256Gcm::new(&key.into());
    let theirs = ring_key(&key);
    for (name, sizes) in [
        ("aes256gcm_seal", &[200, 16 * 1024, MEDIA_CHUNK_BYTES][..]),
        ("aes256gcm_open", &[200, 16 * 1024, MEDIA_CHUNK_BYTES][..]),
    ] {
        let mut g = c.benchmark_group(name);
        let seal = name.ends_with("seal");
        for &len in sizes {
            configure_for_size(&mut g, len);
            let pt = plaintext(len);
            let iv = [9u8; IV_BYTES];
            let mut sealed = pt.clone();
            ours.encrypt_in_place(&Nonce::from(iv), b"", &mut sealed)
                .expect("seal");
            let input = if seal { pt } else { sealed };
            let mut buf = Vec::with_capacity(len + TAG_BYTES);
            g.bench_with_input(BenchmarkId::new("rustcrypto", len), &input, |b, input| {
                b.iter(|| {
                    buf.clear();
                    buf.extend_from_slice(input);
                    if seal {
                        ours.encrypt_in_place(&Nonce::from(iv), b"", &mut buf)
                    } else {
                        ours.decrypt_in_place(&Nonce::from(iv), b"", &mut buf)
                    }
                    .expect("AES-GCM");
                });
            });
            g.bench_with_input(BenchmarkId::new("ring", len), &input, |b, input| {
                b.iter(|| {
                    buf.clear();
                    buf.extend_from_slice(input);
                    let nonce = aead::Nonce::assume_unique_for_key(iv);
                    if seal {
                        theirs
                            .seal_in_place_append_tag(nonce, aead::Aad::empty(), &mut buf)
                            .expect("seal");
                    } else {
                        theirs
                            .open_in_place(nonce, aead::Aad::empty(), &mut buf)
                            .expect("open");
                    }
                });
            });
        }
        g.finish();
    }
}

/// Byte throughput for every size; few flat samples for the 5 MiB runs (milliseconds each).
fn configure_for_size(g: &mut BenchmarkGroup<'_, WallTime>, len: usize) {
    g.throughput(Throughput::Bytes(len as u64));
    if len >= 1024 * 1024 {
        g.sample_size(20).sampling_mode(SamplingMode::Flat);
    } else {
        g.sample_size(100).sampling_mode(SamplingMode::Auto);
    }
}

fn ring_seal(key: &[u8; 32], iv: &[u8; IV_BYTES], pt: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(IV_BYTES + pt.len() + TAG_BYTES);
    out.extend_from_slice(iv);
    out.extend_from_slice(pt);
    let tag = ring_key(key)
        .seal_in_place_separate_tag(
            aead::Nonce::assume_unique_for_key(*iv),
            aead::Aad::empty(),
            &mut out[IV_BYTES..],
        )
        .expect("seal");
    out.extend_from_slice(tag.as_ref());
    out
}

fn ring_open(key: &[u8; 32], data: &[u8]) -> Vec<u8> {
    let iv: [u8; IV_BYTES] = data[..IV_BYTES].try_into().expect("12-byte IV");
    let mut buf = data[IV_BYTES..].to_vec();
    let len = ring_key(key)
        .open_in_place(
            aead::Nonce::assume_unique_for_key(iv),
            aead::Aad::empty(),
            &mut buf,
        )
        .expect("authentic payload")
        .len();
    buf.truncate(len);
    buf
}

/// The label of client-core's AES-GCM rows (payloads, media chunks, call frames, call signals):
/// which AEAD provider client-core was built with.
const CLIENT_CORE: &str = match crypto::AEAD_PROVIDER.as_bytes() {
    b"aws-lc-rs" => "client-core[aws-lc]",
    _ => "client-core",
};

/// The `aws-lc` (and `aws-lc-baseline`) feature's rows: aws-lc-rs doing the same work as the ring
/// rows, so `client-core[aws-lc]` can be read against the provider it wraps.
#[cfg(feature = "aws-lc-baseline")]
mod aws_lc {
    use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
    use client_core::crypto::call_frame::frame_iv;

    use super::{IV_BYTES, TAG_BYTES};

    pub(crate) fn key(key: &[u8; 32]) -> LessSafeKey {
        LessSafeKey::new(UnboundKey::new(&AES_256_GCM, key).expect("32-byte AES-256-GCM key"))
    }

    /// `iv ‖ ct ‖ tag` in one buffer, key schedule included (a payload's work).
    pub(crate) fn seal(key_bytes: &[u8; 32], iv: &[u8; IV_BYTES], pt: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(IV_BYTES + pt.len() + TAG_BYTES);
        out.extend_from_slice(iv);
        out.extend_from_slice(pt);
        let tag = key(key_bytes)
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(*iv),
                Aad::empty(),
                &mut out[IV_BYTES..],
            )
            .expect("seal");
        out.extend_from_slice(tag.as_ref());
        out
    }

    /// Opens `iv ‖ ct ‖ tag` into a new buffer, key schedule included.
    pub(crate) fn open(key_bytes: &[u8; 32], data: &[u8]) -> Vec<u8> {
        let (iv, rest) = data.split_at(IV_BYTES);
        let mut buf = rest.to_vec();
        let nonce = Nonce::try_assume_unique_for_key(iv).expect("12-byte IV");
        let n = key(key_bytes)
            .open_in_place(nonce, Aad::empty(), &mut buf)
            .expect("authentic")
            .len();
        buf.truncate(n);
        buf
    }

    /// One media frame `len ‖ iv ‖ ct ‖ tag` in one buffer.
    pub(crate) fn seal_frame(key_bytes: &[u8; 32], iv: [u8; IV_BYTES], chunk: &[u8]) -> Vec<u8> {
        let len = u32::try_from(chunk.len() + TAG_BYTES).expect("below 4 GiB");
        let mut f = Vec::with_capacity(4 + IV_BYTES + chunk.len() + TAG_BYTES);
        f.extend_from_slice(&len.to_be_bytes());
        f.extend_from_slice(&iv);
        f.extend_from_slice(chunk);
        let tag = key(key_bytes)
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(iv),
                Aad::empty(),
                &mut f[4 + IV_BYTES..],
            )
            .expect("seal");
        f.extend_from_slice(tag.as_ref());
        f
    }

    /// One call frame `counter_be ‖ ct ‖ tag` with the call's long-lived key.
    pub(crate) fn seal_call_frame(
        key: &LessSafeKey,
        base_iv: &[u8; IV_BYTES],
        counter: u64,
        pt: &[u8],
    ) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + pt.len() + TAG_BYTES);
        out.extend_from_slice(&counter.to_be_bytes());
        out.extend_from_slice(pt);
        let nonce = Nonce::assume_unique_for_key(frame_iv(base_iv, counter));
        let tag = key
            .seal_in_place_separate_tag(nonce, Aad::empty(), &mut out[8..])
            .expect("seal");
        out.extend_from_slice(tag.as_ref());
        out
    }

    /// Opens one call frame into a new buffer; returns its counter and plaintext.
    pub(crate) fn open_call_frame(
        key: &LessSafeKey,
        base_iv: &[u8; IV_BYTES],
        frame: &[u8],
    ) -> (u64, Vec<u8>) {
        let counter = u64::from_be_bytes(frame[..8].try_into().expect("8-byte counter"));
        let mut buf = frame[8..].to_vec();
        let nonce = Nonce::assume_unique_for_key(frame_iv(base_iv, counter));
        let n = key
            .open_in_place(nonce, Aad::empty(), &mut buf)
            .expect("authentic frame")
            .len();
        buf.truncate(n);
        (counter, buf)
    }
}

/// Message payloads (§4.4): base64(iv ‖ ct ‖ tag), key schedule per message. The ring (and,
/// with the `aws-lc` feature, aws-lc-rs) rows use client-core's strict base64 too, so the ratio
/// isolates the AEAD.
fn payload(c: &mut Criterion) {
    let key = seed(8);
    let sk = SessionKey::from_bytes(key);
    let mut rng = ChaCha20Rng::from_seed([8; 32]);
    let mut g = c.benchmark_group("payload_encrypt");
    for len in PAYLOAD_SIZES {
        g.throughput(Throughput::Bytes(len as u64));
        let pt = plaintext(len);
        g.bench_with_input(BenchmarkId::new(CLIENT_CORE, len), &pt, |b, pt| {
            b.iter(|| crypto::encrypt_payload(&sk, black_box(pt), &mut rng));
        });
        #[cfg(feature = "aws-lc-baseline")]
        {
            let mut ivs = IvCounter::default();
            g.bench_with_input(BenchmarkId::new("aws-lc-rs", len), &pt, |b, pt| {
                b.iter(|| to_base64(&aws_lc::seal(&key, &ivs.next_iv(), black_box(pt))));
            });
        }
        let mut ivs = IvCounter::default();
        g.bench_with_input(BenchmarkId::new("ring", len), &pt, |b, pt| {
            b.iter(|| to_base64(&ring_seal(&key, &ivs.next_iv(), black_box(pt))));
        });
    }
    g.finish();

    let mut g = c.benchmark_group("payload_decrypt");
    for len in PAYLOAD_SIZES {
        g.throughput(Throughput::Bytes(len as u64));
        let b64 = crypto::encrypt_payload(&sk, &plaintext(len), &mut rng);
        g.bench_with_input(BenchmarkId::new(CLIENT_CORE, len), &b64, |b, s| {
            b.iter(|| crypto::decrypt_payload(&sk, black_box(s)).expect("authentic payload"));
        });
        #[cfg(feature = "aws-lc-baseline")]
        g.bench_with_input(BenchmarkId::new("aws-lc-rs", len), &b64, |b, s| {
            b.iter(|| aws_lc::open(&key, &from_base64(black_box(s)).expect("base64")));
        });
        g.bench_with_input(BenchmarkId::new("ring", len), &b64, |b, s| {
            b.iter(|| ring_open(&key, &from_base64(black_box(s)).expect("base64")));
        });
    }
    g.finish();
}

/// Media chunk frame (§4.6): `u32_BE(len) ‖ iv ‖ ct ‖ tag` of one 5 MiB chunk.
fn media(c: &mut Criterion) {
    let key = seed(9);
    let sk = SessionKey::from_bytes(key);
    let mut rng = ChaCha20Rng::from_seed([9; 32]);
    let chunk = plaintext(MEDIA_CHUNK_BYTES);
    let mut g = c.benchmark_group("media_chunk_encrypt");
    configure_for_size(&mut g, MEDIA_CHUNK_BYTES);
    g.bench_function(CLIENT_CORE, |b| {
        b.iter(|| media::encrypt_media(&sk, black_box(&chunk), &mut rng));
    });
    #[cfg(feature = "aws-lc-baseline")]
    {
        let mut ivs = IvCounter::default();
        g.bench_function("aws-lc-rs", |b| {
            b.iter(|| aws_lc::seal_frame(&key, ivs.next_iv(), black_box(&chunk)));
        });
    }
    // ring writes the frame in one buffer, as an optimised implementation would.
    let mut ivs = IvCounter::default();
    g.bench_function("ring", |b| {
        b.iter(|| {
            let iv = ivs.next_iv();
            let len = u32::try_from(MEDIA_CHUNK_BYTES + TAG_BYTES).expect("below 4 GiB");
            let mut f = Vec::with_capacity(4 + IV_BYTES + MEDIA_CHUNK_BYTES + TAG_BYTES);
            f.extend_from_slice(&len.to_be_bytes());
            f.extend_from_slice(&iv);
            f.extend_from_slice(black_box(&chunk));
            let tag = ring_key(&key)
                .seal_in_place_separate_tag(
                    aead::Nonce::assume_unique_for_key(iv),
                    aead::Aad::empty(),
                    &mut f[4 + IV_BYTES..],
                )
                .expect("seal");
            f.extend_from_slice(tag.as_ref());
            f
        });
    });
    g.finish();

    let object = media::encrypt_chunk_with_iv(&sk, &[4; IV_BYTES], &chunk);
    let mut g = c.benchmark_group("media_chunk_decrypt");
    configure_for_size(&mut g, MEDIA_CHUNK_BYTES);
    g.bench_function(CLIENT_CORE, |b| {
        b.iter(|| media::decrypt_media(&sk, black_box(&object)).expect("authentic chunk"));
    });
    #[cfg(feature = "aws-lc-baseline")]
    g.bench_function("aws-lc-rs", |b| {
        b.iter(|| aws_lc::open(&key, &black_box(&object)[4..]));
    });
    g.bench_function("ring", |b| {
        b.iter(|| ring_open(&key, &black_box(&object)[4..]));
    });
    g.finish();
}

/// Frames pre-encrypted for the decrypt benches: more than the replay window, so cycling through
/// them never hits a counter the window still remembers.
const CALL_FRAMES_CYCLED: usize = 2 * call_frame::REPLAY_WINDOW_FRAMES;

/// The ring baseline's replay window: the same FIFO of distinct counters client-core keeps.
#[derive(Debug, Default)]
struct ReplayWindow {
    seen: BTreeSet<u64>,
    order: VecDeque<u64>,
}

impl ReplayWindow {
    fn accept(&mut self, counter: u64) -> bool {
        if !self.seen.insert(counter) {
            return false;
        }
        if self.order.len() == call_frame::REPLAY_WINDOW_FRAMES
            && let Some(old) = self.order.pop_front()
        {
            self.seen.remove(&old);
        }
        self.order.push_back(counter);
        true
    }
}

/// Call media frames (§4.7): IV = base_iv ^ counter_le, output `counter_be ‖ ct ‖ tag`; the
/// cipher lives as long as the call direction, so its key schedule is outside the loop.
fn call_frame(c: &mut Criterion) {
    let sk = SessionKey::from_bytes(seed(10));
    let km = call_frame::derive_call_key_material(
        &sk,
        "5f0c6a1e-8b7d-4e2a-9c3f-1d2e3f4a5b6c",
        call_frame::CallDirection::CallerToCallee,
    );
    let key: [u8; 32] = km.as_bytes()[..32].try_into().expect("32-byte frame key");
    let base_iv: [u8; IV_BYTES] = km.as_bytes()[32..].try_into().expect("12-byte base IV");
    let theirs = ring_key(&key);
    let pt = plaintext(CALL_FRAME_BYTES);

    let mut g = c.benchmark_group("call_frame_encrypt");
    g.throughput(Throughput::Bytes(CALL_FRAME_BYTES as u64));
    let mut enc = call_frame::FrameEncryptor::new(&km);
    g.bench_function(CLIENT_CORE, |b| {
        b.iter(|| {
            // Stay far from the 2^24-frame rekey limit however long criterion runs.
            if enc.frames_sent() >= call_frame::REKEY_MAX_FRAMES / 2 {
                enc = call_frame::FrameEncryptor::new(&km);
            }
            enc.encrypt(black_box(&pt)).expect("key within limits")
        });
    });
    #[cfg(feature = "aws-lc-baseline")]
    {
        let aws = aws_lc::key(&key);
        let mut counter = 0u64;
        g.bench_function("aws-lc-rs", |b| {
            b.iter(|| {
                counter += 1;
                aws_lc::seal_call_frame(&aws, &base_iv, counter, black_box(&pt))
            });
        });
    }
    let mut counter = 0u64;
    g.bench_function("ring", |b| {
        b.iter(|| {
            counter += 1;
            let mut out = Vec::with_capacity(8 + CALL_FRAME_BYTES + TAG_BYTES);
            out.extend_from_slice(&counter.to_be_bytes());
            out.extend_from_slice(black_box(&pt));
            let tag = theirs
                .seal_in_place_separate_tag(
                    aead::Nonce::assume_unique_for_key(call_frame::frame_iv(&base_iv, counter)),
                    aead::Aad::empty(),
                    &mut out[8..],
                )
                .expect("seal");
            out.extend_from_slice(tag.as_ref());
            out
        });
    });
    g.finish();

    let mut enc = call_frame::FrameEncryptor::new(&km);
    let frames: Vec<Vec<u8>> = (0..CALL_FRAMES_CYCLED)
        .map(|_| enc.encrypt(&pt).expect("key within limits").bytes)
        .collect();
    let mut g = c.benchmark_group("call_frame_decrypt");
    g.throughput(Throughput::Bytes(CALL_FRAME_BYTES as u64));
    let mut dec = call_frame::FrameDecryptor::new(&km);
    let mut next = frames.iter().cycle();
    g.bench_function(CLIENT_CORE, |b| {
        b.iter(|| {
            let f = next.next().expect("cycle never ends");
            dec.decrypt(black_box(f)).expect("fresh authentic frame")
        });
    });
    #[cfg(feature = "aws-lc-baseline")]
    {
        let aws = aws_lc::key(&key);
        let mut window = ReplayWindow::default();
        let mut next = frames.iter().cycle();
        g.bench_function("aws-lc-rs", |b| {
            b.iter(|| {
                let f = black_box(next.next().expect("cycle never ends"));
                let (counter, plain) = aws_lc::open_call_frame(&aws, &base_iv, f);
                assert!(window.accept(counter), "fresh counter");
                plain
            });
        });
    }
    let mut window = ReplayWindow::default();
    let mut next = frames.iter().cycle();
    g.bench_function("ring", |b| {
        b.iter(|| {
            let f = black_box(next.next().expect("cycle never ends"));
            let counter = u64::from_be_bytes(f[..8].try_into().expect("8-byte counter"));
            let mut buf = f[8..].to_vec();
            let len = theirs
                .open_in_place(
                    aead::Nonce::assume_unique_for_key(call_frame::frame_iv(&base_iv, counter)),
                    aead::Aad::empty(),
                    &mut buf,
                )
                .expect("authentic frame")
                .len();
            assert!(window.accept(counter), "fresh counter");
            buf.truncate(len);
            buf
        });
    });
    g.finish();
}

// ---------------------------------------------------------------- security code

fn security_code(c: &mut Criterion) {
    let a = EcdhKeyPair::from_private_bytes(seed(11)).public_key();
    let b_pub = EcdhKeyPair::from_private_bytes(seed(12)).public_key();
    let mut g = c.benchmark_group("security_code");
    g.bench_function("client-core", |b| {
        b.iter(|| compute_security_code(black_box(&a), black_box(&b_pub)));
    });
    g.bench_function("ring", |b| {
        b.iter(|| {
            let (x, y) = (black_box(&a), black_box(&b_pub));
            let (lo, hi) = if x <= y { (x, y) } else { (y, x) };
            let mut ctx = digest::Context::new(&digest::SHA256);
            ctx.update(lo);
            ctx.update(hi);
            to_hex(&ctx.finish().as_ref()[..30])
        });
    });
    g.finish();
}

// ---------------------------------------------------------------- proof of work

/// Fixed challenges shaped like the relay's: 32 lowercase hex characters.
fn pow_challenges() -> Vec<String> {
    (0..POW_CHALLENGES)
        .map(|i| to_hex(&Sha256::digest(format!("pow-bench-{i}").as_bytes())[..16]))
        .collect()
}

fn pow(c: &mut Criterion) {
    let challenges = pow_challenges();
    // Attempts per challenge are a property of the challenge set, computed outside the timing.
    let attempts: u64 = challenges
        .iter()
        .map(|ch| {
            let nonce = solve_pow(ch, POW_DIFFICULTY).expect("solvable at difficulty 4");
            nonce.parse::<u64>().expect("decimal nonce") + 1
        })
        .sum();
    println!(
        "pow_d4: {} challenges, {attempts} attempts in total, mean {:.0} nonces per solve \
         (expected 65536); divide a row's time by {} for the time per solve",
        challenges.len(),
        attempts as f64 / challenges.len() as f64,
        challenges.len(),
    );

    let mut g = c.benchmark_group("pow_d4_set_of_8");
    g.sample_size(10).sampling_mode(SamplingMode::Flat);
    // Elements = SHA-256 attempts, so criterion reports attempts per second.
    g.throughput(Throughput::Elements(attempts));
    g.bench_function("client-core", |b| {
        b.iter(|| {
            for ch in &challenges {
                black_box(solve_pow(black_box(ch), POW_DIFFICULTY).expect("solvable"));
            }
        });
    });
    g.bench_function("ring", |b| {
        b.iter(|| {
            for ch in &challenges {
                black_box(ring_solve_pow(black_box(ch), POW_DIFFICULTY));
            }
        });
    });
    // The reference clients' way: format the nonce, hash the whole string, format hex, compare.
    g.bench_function("naive", |b| {
        b.iter(|| {
            for ch in &challenges {
                black_box(naive_solve_pow(black_box(ch), POW_DIFFICULTY));
            }
        });
    });
    g.finish();
}

fn ring_solve_pow(challenge: &str, difficulty: u32) -> u64 {
    let mut prefix = digest::Context::new(&digest::SHA256);
    prefix.update(challenge.as_bytes());
    let mut itoa = [0u8; 20];
    (0u64..)
        .find(|&i| {
            let mut h = prefix.clone();
            h.update(decimal(i, &mut itoa));
            leading_zero_nibbles(h.finish().as_ref(), difficulty)
        })
        .expect("the counter space is unbounded")
}

fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}

fn naive_solve_pow(challenge: &str, difficulty: u32) -> u64 {
    let zeros = "0".repeat(difficulty as usize);
    (0u64..)
        .find(|i| to_hex(&Sha256::digest(format!("{challenge}{i}").as_bytes())).starts_with(&zeros))
        .expect("the counter space is unbounded")
}

// ---------------------------------------------------------------- call signalling

const SDP_LINE: &str = "a=candidate:842163049 1 udp 1677729535 203.0.113.7 46154 typ srflx raddr 10.0.0.2 rport 46154 generation 0\r\n";
const CALL_ID: &str = "5f0c6a1e-8b7d-4e2a-9c3f-1d2e3f4a5b6c";
const SIGNAL_NOW_MS: u64 = 1_767_225_600_000;

/// The caller's fields of a `call_offer` (§3.4), with a ~1.5 KB SDP.
fn call_offer_fields() -> Map<String, Value> {
    let mut m = Map::new();
    let sdp = format!(
        "v=0\r\no=- 4611731400430051336 2 IN IP4 127.0.0.1\r\n{}",
        SDP_LINE.repeat(13)
    );
    for (k, v) in [
        ("type", Value::from("call_offer")),
        ("call_id", Value::from(CALL_ID)),
        ("from", Value::from("alice_01")),
        ("sdp", Value::from(sdp)),
        ("sdp_type", Value::from("offer")),
        ("mode", Value::from("video")),
    ] {
        m.insert(k.to_owned(), v);
    }
    m
}

fn body_digest_ring(inner: &Map<String, Value>) -> String {
    let mut m = inner.clone();
    m.remove(signal::SIG_FIELD);
    m.remove(signal::BODY_FIELD);
    let full = json::canonical_full(&Value::Object(m));
    to_hex(digest::digest(&digest::SHA256, full.as_bytes()).as_ref())
}

/// client-core's `seal_signal` with ring's Ed25519, SHA-256 and AES-GCM: same JSON work.
fn ring_seal_signal(
    key: &[u8; 32],
    signer: &signature::Ed25519KeyPair,
    mut inner: Map<String, Value>,
    iv: &[u8; IV_BYTES],
) -> String {
    inner.insert(signal::TS_FIELD.into(), Value::from(SIGNAL_NOW_MS));
    inner.insert(signal::NONCE_FIELD.into(), Value::from(to_hex(&iv[..])));
    let body = body_digest_ring(&inner);
    inner.insert(signal::BODY_FIELD.into(), Value::from(body));
    let sig = signer.sign(json::canonical_web(&inner).as_bytes());
    inner.insert(signal::SIG_FIELD.into(), Value::from(to_hex(sig.as_ref())));
    let text = json::canonical_full(&Value::Object(inner));
    to_base64(&ring_seal(key, iv, text.as_bytes()))
}

/// client-core's `open_signal` checks with ring primitives (nonce cache left out).
fn ring_open_signal(key: &[u8; 32], public: &[u8; 32], payload: &str) -> Map<String, Value> {
    let pt = ring_open(key, &from_base64(payload).expect("base64"));
    let text = String::from_utf8(pt).expect("UTF-8");
    let Ok(Value::Object(mut inner)) = serde_json::from_str::<Value>(&text) else {
        panic!("signal is not a JSON object");
    };
    let sig: [u8; 64] = inner
        .get(signal::SIG_FIELD)
        .and_then(Value::as_str)
        .and_then(|s| from_hex_array(s).ok())
        .expect("128 hex chars");
    let mut unsigned = inner.clone();
    unsigned.remove(signal::SIG_FIELD);
    signature::UnparsedPublicKey::new(&signature::ED25519, public)
        .verify(json::canonical_web(&unsigned).as_bytes(), &sig)
        .expect("valid signal signature");
    let body = inner.get(signal::BODY_FIELD).and_then(Value::as_str);
    assert_eq!(body, Some(body_digest_ring(&inner).as_str()), "_body");
    for k in [
        signal::SIG_FIELD,
        signal::TS_FIELD,
        signal::NONCE_FIELD,
        signal::BODY_FIELD,
    ] {
        inner.remove(k);
    }
    inner
}

fn call_signal(c: &mut Criterion) {
    let key = seed(13);
    let sk = SessionKey::from_bytes(key);
    let ours = SigningKeyPair::from_private_bytes(&seed(14));
    let ours_pk = ours.public_key();
    let theirs = ring_ed25519(&seed(14));
    let fields = call_offer_fields();
    let mut rng = ChaCha20Rng::from_seed([13; 32]);
    let payload = signal::seal_signal(&sk, &ours, fields.clone(), SIGNAL_NOW_MS, &mut rng)
        .expect("no reserved fields");
    let envelope = signal::SignalEnvelope {
        frame_type: "call_offer",
        from: "alice_01",
        call_id: CALL_ID,
    };

    // The caller's field map is consumed, so its clone is made outside the timing.
    let mut g = c.benchmark_group("call_signal_sign");
    g.bench_function(CLIENT_CORE, |b| {
        b.iter_batched(
            || fields.clone(),
            |f| signal::seal_signal(&sk, &ours, f, SIGNAL_NOW_MS, &mut rng).expect("signed"),
            BatchSize::SmallInput,
        );
    });
    let mut ivs = IvCounter::default();
    g.bench_function("ring", |b| {
        b.iter_batched(
            || fields.clone(),
            |f| ring_seal_signal(&key, &theirs, f, &ivs.next_iv()),
            BatchSize::SmallInput,
        );
    });
    g.finish();

    // A fresh nonce cache per verification: the same payload is verified again and again.
    let mut g = c.benchmark_group("call_signal_verify");
    g.bench_function(CLIENT_CORE, |b| {
        b.iter_batched_ref(
            signal::NonceCache::new,
            |nonces| {
                signal::open_signal(
                    &sk,
                    black_box(&payload),
                    envelope,
                    Some(&ours_pk),
                    SIGNAL_NOW_MS,
                    nonces,
                )
                .expect("valid signal")
            },
            BatchSize::SmallInput,
        );
    });
    g.bench_function("ring", |b| {
        b.iter(|| ring_open_signal(&key, &ours_pk, black_box(&payload)));
    });
    g.finish();
}

// ---------------------------------------------------------------- JWT (relay)

/// The ring rows' claims (same fields and order as `relay_core::token::Claims`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Claims {
    sub: String,
    jti: String,
    iat: u64,
    exp: u64,
}

const JWT_HEADER_B64: &str = "eyJ0eXAiOiJKV1QiLCJhbGciOiJFZERTQSJ9";
const JWT_SUB: &str = "2b0f5c3e-9a7d-4e61-8c2b-5f1a3d9e7b40";
const JWT_JTI: &str = "8d3e1f0a6b2c4d5e";
/// Issue time of the benched tokens (epoch ms) and their lifetime (7 days).
const JWT_NOW_MS: u64 = 1_767_225_600_000;
const JWT_TTL_MS: u64 = 7 * 86_400_000;

fn claims() -> Claims {
    Claims {
        sub: JWT_SUB.to_owned(),
        jti: JWT_JTI.to_owned(),
        iat: JWT_NOW_MS / 1000,
        exp: (JWT_NOW_MS + JWT_TTL_MS) / 1000,
    }
}

/// `relay_core::token::TokenKeys` (the relay's own issue/verify, `now` injected) next to ring.
fn jwt(c: &mut Criterion) {
    let key_seed = seed(15);
    let keys = relay_core::token::TokenKeys::from_seed(key_seed);
    let public = SigningKeyPair::from_private_bytes(&key_seed).public_key();
    let theirs = ring_ed25519(&key_seed);
    let claims = claims();
    let token = keys
        .issue(JWT_SUB, JWT_JTI, JWT_NOW_MS, JWT_TTL_MS)
        .expect("JWT");

    let mut g = c.benchmark_group("jwt_issue");
    g.bench_function("relay-core", |b| {
        b.iter(|| {
            keys.issue(
                black_box(JWT_SUB),
                black_box(JWT_JTI),
                JWT_NOW_MS,
                JWT_TTL_MS,
            )
            .expect("JWT")
        });
    });
    // ring: the same compact JWS by hand (header, claims JSON, base64url, Ed25519).
    g.bench_function("ring", |b| {
        b.iter(|| {
            let body = serde_json::to_vec(black_box(&claims)).expect("claims JSON");
            let mut t = format!("{JWT_HEADER_B64}.{}", URL_SAFE_NO_PAD.encode(body));
            let sig = URL_SAFE_NO_PAD.encode(theirs.sign(t.as_bytes()));
            t.push('.');
            t.push_str(&sig);
            t
        });
    });
    g.finish();

    let mut g = c.benchmark_group("jwt_verify");
    g.bench_function("relay-core", |b| {
        b.iter(|| {
            keys.verify(black_box(&token), JWT_NOW_MS)
                .expect("valid JWT")
        });
    });
    g.bench_function("ring", |b| {
        b.iter(|| {
            let t = black_box(&token);
            let (signed, sig) = t.rsplit_once('.').expect("three parts");
            let (_, body) = signed.split_once('.').expect("three parts");
            let sig = URL_SAFE_NO_PAD.decode(sig).expect("base64url signature");
            signature::UnparsedPublicKey::new(&signature::ED25519, &public)
                .verify(signed.as_bytes(), &sig)
                .expect("valid JWT");
            let body = URL_SAFE_NO_PAD.decode(body).expect("base64url claims");
            let c = serde_json::from_slice::<Claims>(&body).expect("claims JSON");
            assert!(JWT_NOW_MS < c.exp * 1000, "not expired");
            c
        });
    });
    g.finish();
}

// ---------------------------------------------------------------- harness

fn machine(_: &mut Criterion) {
    println!("{}", MachineInfo::detect());
}

fn config() -> Criterion {
    // Short settings so a full run stays within a few minutes; CLI flags still override them.
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = crypto;
    config = config();
    targets = machine, ed25519, key_agreement, hashes, identity, aes_gcm_raw, payload, media,
        call_frame, security_code, pow, call_signal, jwt
}
criterion_main!(crypto);
