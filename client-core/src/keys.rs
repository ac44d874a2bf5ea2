//! Keys: mnemonics, identity derivation (BIP-39 + SLIP-0010), challenge signing, security codes.
//!
//! * [`new_mnemonic`] draws 128 bits of entropy from the injected RNG and returns 12 English words.
//! * [`validate_mnemonic_words`] accepts **exactly 12** lowercase English BIP-39 words separated by
//!   single ASCII spaces, with a valid checksum. No trimming, case folding or whitespace collapsing
//!   is done here (the strictest reference client, SW, behaves the same); a UI that wants to be
//!   lenient calls [`normalize_mnemonic_input`] first. We differ from the reference web client,
//!   which also accepts 15/18/21/24-word phrases: the spec fixes the length at 12.
//! * [`derive_identity`]: seed = PBKDF2-HMAC-SHA512(mnemonic, "mnemonic", 2048) (PROTOCOL §4.1),
//!   then SLIP-0010 on the ed25519 curve with every level hardened (§4.2): Ed25519 at
//!   `44'/0'/0'/0'/0'`; X25519 at `44'/1'/0'/0'/0'` ([`X25519Path::Spec`], the default) or at the
//!   web client's `44'/1'/0'/0'/1'` ([`X25519Path::WebSdk`], the option for restoring accounts
//!   created with the reference web client).
//! * [`compute_security_code`]: SHA-256(smaller ‖ larger X25519 public key), first 30 bytes, hex.

use std::fmt;

use bip39::{Language, Mnemonic};
use ed25519_dalek::{Signer as _, SigningKey, Verifier as _, VerifyingKey};
use hmac::{Hmac, Mac as _};
use rand_core::CryptoRng;
use sha2::{Digest as _, Sha256, Sha512};
use x25519_dalek::{PublicKey as XPublicKey, StaticSecret};
use zeroize::Zeroize as _;

use crate::encoding::{from_base64_array, to_base64, to_hex};

/// Number of words in a mnemonic (SPEC "Limits").
pub const MNEMONIC_WORDS: usize = 12;
/// Entropy behind a 12-word mnemonic, in bytes (128 bits).
pub const MNEMONIC_ENTROPY_BYTES: usize = 16;
/// Length of a security code in hex characters.
pub const SECURITY_CODE_HEX_CHARS: usize = 60;
/// Hardened-index flag of SLIP-0010.
const HARDENED: u32 = 0x8000_0000;
/// Ed25519 signing key path, every level hardened.
pub const ED25519_PATH: [u32; 5] = [44, 0, 0, 0, 0];
/// X25519 path of the spec and the native reference clients.
pub const X25519_SPEC_PATH: [u32; 5] = [44, 1, 0, 0, 0];
/// X25519 path of the reference web client.
pub const X25519_WEB_SDK_PATH: [u32; 5] = [44, 1, 0, 0, 1];

/// Errors of the key module. Never contains mnemonic words or key bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The mnemonic is not exactly 12 single-space-separated lowercase words.
    #[error("mnemonic must be exactly 12 lowercase words separated by single spaces")]
    MnemonicShape,
    /// A word is not in the English BIP-39 list.
    #[error("mnemonic word #{0} is not in the English BIP-39 word list")]
    UnknownWord(usize),
    /// The checksum bits do not match.
    #[error("mnemonic checksum mismatch")]
    Checksum,
    /// A public key is not 32 bytes of valid base64, or not a valid point.
    #[error("invalid public key")]
    PublicKey,
    /// A signature is malformed or does not verify.
    #[error("invalid signature")]
    Signature,
}

/// Which X25519 derivation path to use (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum X25519Path {
    /// `44'/1'/0'/0'/0'`: the spec's path (default).
    #[default]
    Spec,
    /// `44'/1'/0'/0'/1'`: the reference web client's path, to restore accounts made on the web.
    WebSdk,
}

impl X25519Path {
    /// The hardened path indexes (without the hardened bit).
    pub fn indexes(self) -> [u32; 5] {
        match self {
            Self::Spec => X25519_SPEC_PATH,
            Self::WebSdk => X25519_WEB_SDK_PATH,
        }
    }
}

/// A string holding a secret (the mnemonic); redacted in `Debug`, wiped on drop.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretString(String);

impl SecretString {
    /// Wraps a secret string.
    pub fn new(s: String) -> Self {
        Self(s)
    }
    /// The secret text.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretString(<redacted>)")
    }
}

impl Drop for SecretString {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

/// Generates a fresh 12-word mnemonic from 128 bits drawn from `rng`.
pub fn new_mnemonic<R: CryptoRng + ?Sized>(rng: &mut R) -> SecretString {
    let mut entropy = [0u8; MNEMONIC_ENTROPY_BYTES];
    rng.fill_bytes(&mut entropy);
    let words = Language::English.word_list();
    // 128 bits of entropy + 4 checksum bits = 132 bits = 12 × 11-bit word indexes.
    let check = Sha256::digest(entropy)[0] >> 4;
    let mut bits: u128 = u128::from_be_bytes(entropy);
    let mut idx = [0usize; MNEMONIC_WORDS];
    // Last word: low 7 bits of entropy followed by the 4 checksum bits.
    idx[MNEMONIC_WORDS - 1] = (((bits & 0x7f) as usize) << 4) | usize::from(check);
    bits >>= 7;
    for i in (0..MNEMONIC_WORDS - 1).rev() {
        idx[i] = (bits & 0x7ff) as usize;
        bits >>= 11;
    }
    entropy.zeroize();
    let sentence: Vec<&str> = idx.iter().map(|&i| words[i]).collect();
    SecretString(sentence.join(" "))
}

/// Lenient UI helper: trims, lower-cases ASCII and collapses runs of whitespace to one space.
pub fn normalize_mnemonic_input(input: &str) -> SecretString {
    let words: Vec<String> = input
        .split_whitespace()
        .map(str::to_ascii_lowercase)
        .collect();
    SecretString(words.join(" "))
}

/// Parses a mnemonic strictly (see the module doc for the exact rule).
fn parse_mnemonic(mnemonic: &str) -> Result<Mnemonic, KeyError> {
    let words: Vec<&str> = mnemonic.split(' ').collect();
    if words.len() != MNEMONIC_WORDS || words.iter().any(|w| w.is_empty()) {
        return Err(KeyError::MnemonicShape);
    }
    for (i, w) in words.iter().enumerate() {
        if Language::English.find_word(w).is_none() {
            return Err(KeyError::UnknownWord(i));
        }
    }
    Mnemonic::parse_in_normalized(Language::English, mnemonic).map_err(|e| match e {
        bip39::Error::UnknownWord(i) => KeyError::UnknownWord(i),
        bip39::Error::InvalidChecksum => KeyError::Checksum,
        _ => KeyError::MnemonicShape,
    })
}

/// Returns true for exactly 12 lowercase English BIP-39 words, single-space separated, valid checksum.
pub fn validate_mnemonic_words(mnemonic: &str) -> bool {
    parse_mnemonic(mnemonic).is_ok()
}

/// Like [`validate_mnemonic_words`] but says why a mnemonic is rejected.
pub fn check_mnemonic(mnemonic: &str) -> Result<(), KeyError> {
    parse_mnemonic(mnemonic).map(|_| ())
}

/// BIP-39 seed (PBKDF2-HMAC-SHA512, 2048 rounds, salt `"mnemonic"`) of a valid mnemonic.
pub fn mnemonic_to_seed(mnemonic: &str) -> Result<[u8; 64], KeyError> {
    Ok(parse_mnemonic(mnemonic)?.to_seed_normalized(""))
}

fn hmac_sha512(key: &[u8], parts: &[&[u8]]) -> [u8; 64] {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = <Hmac<Sha512> as hmac::KeyInit>::new_from_slice(key)
        .expect("HMAC accepts keys of any length");
    for p in parts {
        mac.update(p);
    }
    let out = mac.finalize().into_bytes();
    let mut r = [0u8; 64];
    r.copy_from_slice(&out);
    r
}

/// SLIP-0010 ed25519-curve derivation with every index hardened; returns the 32-byte private key.
pub fn slip10_derive(seed: &[u8], path: &[u32]) -> [u8; 32] {
    let i = hmac_sha512(b"ed25519 seed", &[seed]);
    let (mut k, mut c) = split64(&i);
    for &index in path {
        let i = hmac_sha512(&c, &[&[0u8], &k, &(index | HARDENED).to_be_bytes()]);
        (k, c) = split64(&i);
    }
    c.zeroize();
    k
}

fn split64(i: &[u8; 64]) -> ([u8; 32], [u8; 32]) {
    let mut k = [0u8; 32];
    let mut c = [0u8; 32];
    k.copy_from_slice(&i[..32]);
    c.copy_from_slice(&i[32..]);
    (k, c)
}

/// Ed25519 key pair (private half redacted in `Debug`, zeroized on drop by the dalek type).
#[derive(Clone)]
pub struct SigningKeyPair(SigningKey);

impl SigningKeyPair {
    /// Builds the pair from a 32-byte Ed25519 seed.
    pub fn from_private_bytes(bytes: &[u8; 32]) -> Self {
        Self(SigningKey::from_bytes(bytes))
    }
    /// The 32-byte public key.
    pub fn public_key(&self) -> [u8; 32] {
        self.0.verifying_key().to_bytes()
    }
    /// The 32-byte private seed (handle with care).
    pub fn private_bytes(&self) -> [u8; 32] {
        self.0.to_bytes()
    }
    /// Pure Ed25519 signature over `msg`.
    pub fn sign(&self, msg: &[u8]) -> [u8; 64] {
        self.0.sign(msg).to_bytes()
    }
}

impl fmt::Debug for SigningKeyPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningKeyPair")
            .field("public", &to_base64(&self.public_key()))
            .field("private", &"<redacted>")
            .finish()
    }
}

/// X25519 key pair (private half redacted in `Debug`, zeroized on drop by the dalek type).
#[derive(Clone)]
pub struct EcdhKeyPair {
    secret: StaticSecret,
    public: XPublicKey,
}

impl EcdhKeyPair {
    /// Builds the pair from 32 private bytes (unclamped; clamping happens inside X25519).
    pub fn from_private_bytes(bytes: [u8; 32]) -> Self {
        let secret = StaticSecret::from(bytes);
        let public = XPublicKey::from(&secret);
        Self { secret, public }
    }
    /// The 32-byte public key.
    pub fn public_key(&self) -> [u8; 32] {
        self.public.to_bytes()
    }
    /// The 32 private bytes (handle with care).
    pub fn private_bytes(&self) -> [u8; 32] {
        self.secret.to_bytes()
    }
    /// X25519(my private, their public): the raw shared secret.
    pub fn diffie_hellman(&self, their_public: &[u8; 32]) -> [u8; 32] {
        self.secret
            .diffie_hellman(&XPublicKey::from(*their_public))
            .to_bytes()
    }
}

impl fmt::Debug for EcdhKeyPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EcdhKeyPair")
            .field("public", &to_base64(&self.public_key()))
            .field("private", &"<redacted>")
            .finish()
    }
}

/// A derived identity: mnemonic, Ed25519 signing pair and X25519 agreement pair.
#[derive(Clone, Debug)]
pub struct Identity {
    /// The mnemonic it was derived from.
    pub mnemonic: SecretString,
    /// Ed25519 pair (authentication and call signatures).
    pub signing_key: SigningKeyPair,
    /// X25519 pair (session-key agreement).
    pub ecdh_key: EcdhKeyPair,
    /// Which X25519 path produced `ecdh_key`.
    pub x25519_path: X25519Path,
}

impl Identity {
    /// Base64 of the Ed25519 public key (wire form).
    pub fn signing_public_b64(&self) -> String {
        to_base64(&self.signing_key.public_key())
    }
    /// Base64 of the X25519 public key (wire form).
    pub fn ecdh_public_b64(&self) -> String {
        to_base64(&self.ecdh_key.public_key())
    }
    /// Signs an auth challenge as received (UTF-8 bytes) and returns the base64 signature (§1.1.3).
    pub fn sign_challenge(&self, challenge: &str) -> String {
        to_base64(&self.signing_key.sign(challenge.as_bytes()))
    }
}

/// Derives the identity of a valid 12-word mnemonic.
pub fn derive_identity(mnemonic: &str, x25519_path: X25519Path) -> Result<Identity, KeyError> {
    let mut seed = mnemonic_to_seed(mnemonic)?;
    let mut ed = slip10_derive(&seed, &ED25519_PATH);
    let x = slip10_derive(&seed, &x25519_path.indexes());
    seed.zeroize();
    let signing_key = SigningKeyPair::from_private_bytes(&ed);
    ed.zeroize();
    Ok(Identity {
        mnemonic: SecretString(mnemonic.to_owned()),
        signing_key,
        ecdh_key: EcdhKeyPair::from_private_bytes(x),
        x25519_path,
    })
}

/// Verifies a pure Ed25519 signature with a 32-byte public key.
pub fn verify_signature(public_key: &[u8; 32], msg: &[u8], sig: &[u8; 64]) -> Result<(), KeyError> {
    let vk = VerifyingKey::from_bytes(public_key).map_err(|_| KeyError::PublicKey)?;
    let sig = ed25519_dalek::Signature::from_bytes(sig);
    vk.verify(msg, &sig).map_err(|_| KeyError::Signature)
}

/// Verifies a base64 challenge signature against a base64 Ed25519 public key.
pub fn verify_challenge_signature(
    public_key_b64: &str,
    challenge: &str,
    signature_b64: &str,
) -> Result<(), KeyError> {
    let pk: [u8; 32] = from_base64_array(public_key_b64).map_err(|_| KeyError::PublicKey)?;
    let sig: [u8; 64] = from_base64_array(signature_b64).map_err(|_| KeyError::Signature)?;
    verify_signature(&pk, challenge.as_bytes(), &sig)
}

/// The 32-byte fingerprint input: SHA-256(min(a, b) ‖ max(a, b)).
fn security_digest(a: &[u8; 32], b: &[u8; 32]) -> [u8; 32] {
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    let mut h = Sha256::new();
    h.update(lo);
    h.update(hi);
    h.finalize().into()
}

/// Security code of two X25519 public keys: 60 lowercase hex chars, symmetric in its arguments.
pub fn compute_security_code(my_ecdh_public: &[u8; 32], their_ecdh_public: &[u8; 32]) -> String {
    let d = security_digest(my_ecdh_public, their_ecdh_public);
    to_hex(&d[..SECURITY_CODE_HEX_CHARS / 2])
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;

    #[test]
    fn new_mnemonic_is_valid_and_seeded() {
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        for _ in 0..50 {
            let m = new_mnemonic(&mut rng);
            assert!(validate_mnemonic_words(m.expose()), "{m:?}");
            let mut e = [0u8; 16];
            // cross-check against the bip39 crate's encoder
            let parsed = Mnemonic::parse_in_normalized(Language::English, m.expose()).unwrap();
            e.copy_from_slice(&parsed.to_entropy());
            let again = Mnemonic::from_entropy_in(Language::English, &e).unwrap();
            assert_eq!(again.to_string(), m.expose());
        }
        let a = new_mnemonic(&mut ChaCha20Rng::seed_from_u64(1));
        let b = new_mnemonic(&mut ChaCha20Rng::seed_from_u64(1));
        assert_eq!(a, b);
    }

    #[test]
    fn debug_redacts() {
        let id = derive_identity(
            "abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about",
            X25519Path::Spec,
        )
        .unwrap();
        let s = format!("{id:?}");
        assert!(!s.contains("abandon"));
        assert!(!s.contains(&to_base64(&id.ecdh_key.private_bytes())));
        assert!(!s.contains(&to_base64(&id.signing_key.private_bytes())));
        assert!(s.contains("redacted"));
    }

    #[test]
    fn normalize_helper() {
        let m = normalize_mnemonic_input(
            "  ABANDON abandon\tabandon abandon abandon abandon abandon abandon abandon abandon abandon About \n",
        );
        assert!(validate_mnemonic_words(m.expose()));
    }
}
