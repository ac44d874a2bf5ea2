//! The public limits have the values their documentation states (hours, days, MiB), and the
//! two size formulas add up what they say.

use relay_core::limits as l;

#[test]
fn durations_are_the_documented_ones() {
    const MIN: u64 = 60_000;
    const HOUR: u64 = 60 * MIN;
    assert_eq!(l::MINUTE_MS, MIN);
    assert_eq!(l::HOUR_MS, HOUR);
    assert_eq!(l::JWT_TTL_MS, 24 * HOUR);
    assert_eq!(l::OFFLINE_TTL_MS, 24 * HOUR);
    assert_eq!(l::TOMBSTONE_TTL_MS, 7 * 24 * HOUR);
    assert_eq!(l::ALIAS_HOLD_MS, 15 * MIN);
    assert_eq!(l::CHANNEL_ORDER_TTL_MS, 30 * MIN);
    assert_eq!(l::MEDIA_TTL_MS, 24 * HOUR);
    assert_eq!(l::INCOMPLETE_UPLOAD_TTL_MS, 2 * HOUR);
    assert_eq!(l::INCOMPLETE_UPLOAD_IDLE_MS, 10 * MIN);
    assert_eq!(l::TURN_CREDENTIAL_TTL_S, 86_400);
}

#[test]
fn sizes_are_the_documented_ones() {
    const MIB: u64 = 1 << 20;
    assert_eq!(l::MAX_OFFLINE_QUEUE_BYTES_PER_CONVERSATION, 2 * MIB);
    assert_eq!(l::MAX_OFFLINE_QUEUE_BYTES_PER_RECIPIENT, 32 * MIB);
    assert_eq!(l::MAX_OFFLINE_QUEUE_BYTES_PER_SENDER, 4 * MIB);
    assert_eq!(l::MAX_OFFLINE_QUEUE_BYTES_TOTAL, 1024 * MIB);
    assert_eq!(l::SYNC_WINDOW_BYTES, 512 * 1024);
    assert_eq!(
        l::MAX_MEDIA_BYTES_PER_USER,
        wire::limits::MAX_MEDIA_OBJECT_BYTES
    );
    assert_eq!(l::MAX_MEDIA_BYTES_PER_USER / MIB, 100);
}

#[test]
fn the_size_formulas_add_their_parts() {
    // Id and payload bytes plus the fixed overhead.
    assert_eq!(l::QUEUED_MESSAGE_OVERHEAD_BYTES, 256);
    assert_eq!(l::queued_message_bytes(3, 5), 3 + 5 + 256);
    assert_eq!(l::queued_message_bytes(0, 0), 256);
    // Id, conversation id and payload bytes plus the frame's own.
    assert_eq!(l::MSG_FRAME_OVERHEAD_BYTES, 192);
    assert_eq!(l::msg_frame_bytes(3, 5, 7), 3 + 5 + 7 + 192);
    assert_eq!(l::msg_frame_bytes(0, 0, 0), 192);
}
