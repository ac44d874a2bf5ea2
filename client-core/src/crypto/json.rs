//! JSON text exactly as JavaScript's `JSON.stringify` writes it, and the two canonical forms used
//! for call-signal signatures (PROTOCOL §3.5).
//!
//! * [`canonical_web`]: the reference web client's form, `JSON.stringify(obj, sortedTopLevelKeys)`.
//!   An array replacer is a whitelist applied at every depth, so nested objects keep only keys that
//!   also appear at the top level, in top-level (sorted) order.
//! * [`canonical_full`]: every key at every depth kept and sorted by UTF-16 code units.
//!
//! Numbers follow JS `Number#toString` (integers without exponent or decimal point below 1e21,
//! exponent form with explicit sign otherwise); strings escape `"` `\` `\b` `\f` `\n` `\r` `\t`,
//! other controls as `\u00xx`, nothing else (`/` and non-ASCII stay raw).

use serde_json::{Map, Number, Value};

/// Appends `s` as a JSON string literal in `JSON.stringify` form.
pub fn write_js_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                out.push_str(&format!("\\u{:04x}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A JSON string literal in `JSON.stringify` form.
pub fn js_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    write_js_string(&mut out, s);
    out
}

/// Renders a number as JavaScript would.
pub fn js_number(n: &Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        // Above 2^53 JS would have lost precision already; print the shortest f64 form like JS.
        return js_f64(u as f64);
    }
    js_f64(n.as_f64().unwrap_or(0.0))
}

fn js_f64(f: f64) -> String {
    if f == 0.0 {
        return "0".to_owned();
    }
    let a = f.abs();
    if (1e-6..1e21).contains(&a) {
        // Rust's Display is the shortest round-trip form without exponent, like JS in this range.
        format!("{f}")
    } else {
        let s = format!("{f:e}");
        match s.split_once('e') {
            Some((m, e)) if !e.starts_with('-') => format!("{m}e+{e}"),
            _ => s,
        }
    }
}

fn utf16_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// Keys of a map sorted by UTF-16 code units (JS `Array#sort` default order).
pub fn sorted_keys(map: &Map<String, Value>) -> Vec<&str> {
    let mut keys: Vec<&str> = map.keys().map(String::as_str).collect();
    keys.sort_by(|a, b| utf16_cmp(a, b));
    keys
}

fn write_whitelisted(out: &mut String, v: &Value, allow: &[&str]) {
    match v {
        Value::Object(m) => {
            out.push('{');
            let mut first = true;
            for k in allow {
                if let Some(val) = m.get(*k) {
                    if !first {
                        out.push(',');
                    }
                    first = false;
                    write_js_string(out, k);
                    out.push(':');
                    write_whitelisted(out, val, allow);
                }
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_whitelisted(out, x, allow);
            }
            out.push(']');
        }
        scalar => write_scalar(out, scalar),
    }
}

fn write_scalar(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&js_number(n)),
        Value::String(s) => write_js_string(out, s),
        Value::Array(_) | Value::Object(_) => {}
    }
}

/// The web client's canonical form (see the module doc).
pub fn canonical_web(map: &Map<String, Value>) -> String {
    let keys = sorted_keys(map);
    let mut out = String::new();
    write_whitelisted(&mut out, &Value::Object(map.clone()), &keys);
    out
}

fn write_full(out: &mut String, v: &Value) {
    match v {
        Value::Object(m) => {
            out.push('{');
            for (i, k) in sorted_keys(m).into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_js_string(out, k);
                out.push(':');
                if let Some(val) = m.get(k) {
                    write_full(out, val);
                }
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_full(out, x);
            }
            out.push(']');
        }
        scalar => write_scalar(out, scalar),
    }
}

/// Every key at every depth, sorted (the form `_body` digests; see [`super::signal`]).
pub fn canonical_full(v: &Value) -> String {
    let mut out = String::new();
    write_full(&mut out, v);
    out
}

/// Paths (`a.b`) of nested object keys that [`canonical_web`] leaves out, i.e. fields a reference
/// signature does not cover.
pub fn uncovered_paths(map: &Map<String, Value>) -> Vec<String> {
    let keys = sorted_keys(map);
    let mut out = Vec::new();
    for k in &keys {
        if let Some(v) = map.get(*k) {
            collect_uncovered(v, k, &keys, &mut out);
        }
    }
    // Independent of serde_json's map order (`preserve_order` may be on in the workspace).
    out.sort_by(|a, b| utf16_cmp(a, b));
    out
}

fn collect_uncovered(v: &Value, path: &str, allow: &[&str], out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, val) in m {
                let p = format!("{path}.{k}");
                if allow.contains(&k.as_str()) {
                    collect_uncovered(val, &p, allow, out);
                } else {
                    out.push(p);
                }
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                collect_uncovered(x, &format!("{path}[{i}]"), allow, out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn web_form_matches_node() {
        let v = json!({"b":1,"a":{"b":2,"z":3,"a":4},"c":"x"});
        let Value::Object(m) = v else { panic!() };
        assert_eq!(canonical_web(&m), r#"{"a":{"a":4,"b":2},"b":1,"c":"x"}"#);
        assert_eq!(uncovered_paths(&m), vec!["a.z".to_owned()]);
        assert_eq!(
            canonical_full(&Value::Object(m)),
            r#"{"a":{"a":4,"b":2,"z":3},"b":1,"c":"x"}"#
        );
    }

    #[test]
    fn js_escapes_and_numbers() {
        assert_eq!(
            js_string("a\"\\/\u{1}\n\u{7f}é🔒"),
            "\"a\\\"\\\\/\\u0001\\n\u{7f}é🔒\""
        );
        let n = |v: Value| match v {
            Value::Number(n) => js_number(&n),
            _ => panic!(),
        };
        assert_eq!(n(json!(1700000000000u64)), "1700000000000");
        assert_eq!(n(json!(-5)), "-5");
        assert_eq!(n(json!(1.5)), "1.5");
        assert_eq!(n(json!(1e21)), "1e+21");
        assert_eq!(n(json!(1e-7)), "1e-7");
        assert_eq!(n(json!(0.000001)), "0.000001");
        assert_eq!(n(json!(2.0)), "2");
    }
}
