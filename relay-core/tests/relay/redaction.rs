//! The secrets in a relay's configuration name their type in `Debug` and never their value
//! (a `Config` is logged at start-up).

use relay_core::config::{TurnSecret, WebhookSecret};
use relay_core::{Config, JwtSigningKey};

#[test]
fn secrets_name_their_type_and_hide_their_value() {
    assert_eq!(
        format!("{:?}", WebhookSecret(b"hook-s3cret".to_vec())),
        "WebhookSecret(<redacted>)"
    );
    assert_eq!(
        format!("{:?}", TurnSecret("turn-s3cret".into())),
        "TurnSecret(<redacted>)"
    );
    assert_eq!(
        format!("{:?}", JwtSigningKey([7; 32])),
        "JwtSigningKey(<redacted>)"
    );
}

#[test]
fn a_config_with_secrets_does_not_print_them() {
    let config = Config {
        payment_webhook_secret: WebhookSecret(b"hook-s3cret".to_vec()),
        ..Config::default()
    };
    let shown = format!("{config:?}");
    assert!(shown.contains("WebhookSecret(<redacted>)"), "{shown}");
    assert!(!shown.contains("s3cret"), "{shown}");
}
