//! The edges of every channel bound, each side of it: name and description lengths and the
//! characters they may hold, a listing's price, a search query's length, a post's size, and
//! which post a page may start `before`.

use relay_core::limits::{MAX_CHANNEL_PRICE_USDT, MAX_SEARCH_QUERY_BYTES};
use serde_json::json;
use wire::http::paths;
use wire::limits::{CHANNEL_DESCRIPTION_MAX_CHARS, CHANNEL_NAME_MAX_CHARS, MAX_CHANNEL_POST_BYTES};

use crate::channels::{create, list};
use crate::orders::cw;
use crate::world::{User, World};

fn create_with(w: &mut World, u: &User, name: &str, description: &str) -> (u16, Option<String>) {
    let r = w.post(
        paths::CHANNELS,
        json!({"name": name, "description": description, "is_public": true}),
        Some(&u.token),
    );
    (r.status, r.error_code())
}

#[test]
fn a_channel_name_is_one_to_the_maximum_characters_and_a_description_up_to_its_maximum() {
    let mut w = World::with_config(relay_core::Config {
        free_channel_quota: 10,
        ..crate::orders::commerce_config()
    });
    let a = w.user("a");
    let refused = (400, Some("INVALID_FIELD".to_owned()));
    assert_eq!(create_with(&mut w, &a, "", "d"), refused);
    assert_eq!(create_with(&mut w, &a, "n", "").0, 201);
    let name = "n".repeat(CHANNEL_NAME_MAX_CHARS);
    assert_eq!(create_with(&mut w, &a, &name, "d").0, 201);
    let name = "n".repeat(CHANNEL_NAME_MAX_CHARS + 1);
    assert_eq!(create_with(&mut w, &a, &name, "d"), refused);
    let description = "d".repeat(CHANNEL_DESCRIPTION_MAX_CHARS);
    assert_eq!(create_with(&mut w, &a, "n", &description).0, 201);
    let description = "d".repeat(CHANNEL_DESCRIPTION_MAX_CHARS + 1);
    assert_eq!(create_with(&mut w, &a, "n", &description), refused);
}

#[test]
fn a_description_may_hold_line_breaks_and_tabs_but_no_other_control_character() {
    let mut w = cw();
    let a = w.user("a");
    assert_eq!(create_with(&mut w, &a, "n", "one\ntwo").0, 201);
    assert_eq!(create_with(&mut w, &a, "n", "one\ttwo").0, 201);
    assert_eq!(
        create_with(&mut w, &a, "n", "one\u{7}two"),
        (400, Some("INVALID_FIELD".to_owned()))
    );
}

#[test]
fn a_listing_price_may_be_the_maximum_but_not_above_it() {
    let mut w = cw();
    let a = w.user("a");
    let ch = create(&mut w, &a, "shop", true);
    let r = list(&mut w, &a, &ch, json!(MAX_CHANNEL_PRICE_USDT + 1));
    assert_eq!(
        (r.status, r.error_code().as_deref()),
        (400, Some("INVALID_FIELD"))
    );
    let r = list(&mut w, &a, &ch, json!(MAX_CHANNEL_PRICE_USDT));
    assert_eq!(r.status, 200, "{:?}", r.body_json());
    assert_eq!(r.body_json()["price_usdt"], MAX_CHANNEL_PRICE_USDT);
}

#[test]
fn a_search_query_may_be_the_maximum_length_but_not_above_it() {
    let mut w = cw();
    let a = w.user("a");
    let q = "q".repeat(MAX_SEARCH_QUERY_BYTES);
    let search = |w: &mut World, q: &str| {
        w.get(&format!("/api/v1/channels/search?q={q}"), Some(&a.token))
            .status
    };
    assert_eq!(search(&mut w, &q), 200);
    assert_eq!(search(&mut w, &format!("{q}q")), 400);
}

#[test]
fn a_post_may_be_the_maximum_size_but_not_above_it() {
    let mut w = cw();
    let a = w.user("a");
    let ch = create(&mut w, &a, "feed", true);
    let posts = paths::with(paths::CHANNEL_POSTS, &ch);
    let r = w.post(
        &posts,
        json!({"content": "x".repeat(MAX_CHANNEL_POST_BYTES)}),
        Some(&a.token),
    );
    assert_eq!(r.status, 201);
    let r = w.post(
        &posts,
        json!({"content": "x".repeat(MAX_CHANNEL_POST_BYTES + 1)}),
        Some(&a.token),
    );
    assert_eq!(r.status, 413);
}

#[test]
fn a_page_cannot_start_before_a_post_of_another_channel() {
    let mut w = cw();
    let a = w.user("a");
    let mine = create(&mut w, &a, "mine", true);
    let other = create(&mut w, &a, "other", true);
    let r = w.post(
        &paths::with(paths::CHANNEL_POSTS, &other),
        json!({"content": "elsewhere"}),
        Some(&a.token),
    );
    assert_eq!(r.status, 201);
    let foreign = r.body_json()["post_id"].as_str().unwrap().to_owned();
    let r = w.get(
        &format!("/api/v1/channels/{mine}/posts?before={foreign}"),
        Some(&a.token),
    );
    assert_eq!(
        (r.status, r.error_code().as_deref()),
        (400, Some("INVALID_FIELD"))
    );
}
