//! The workspace's structure, read from its sources as text, so that ARCHITECTURE.md's claims
//! are checked by tests (`tests/`) instead of by eye.
//!
//! * [`ModuleGraph::of_crate`]: one node per source file of a crate's library (its module
//!   path: `cases::auth` for `src/cases/auth.rs`, `ctx` for `src/ctx/mod.rs`), one arrow per
//!   module a file names through a `crate::`, `super::` or `self::` path (in `use` lines and
//!   in code). A path names the deepest module it runs through (`crate::ctx::ws::Ws` names
//!   `ctx::ws`); a name re-exported at the crate root (`pub use relay::Relay` in `lib.rs`)
//!   names the module it comes from. Comments and a file's trailing `#[cfg(test)]` block are
//!   left out; bare relative paths (`auth::cases()` from a parent to its child) are not
//!   arrows.
//! * [`ModuleGraph::circles`]: the strongly connected components of more than one file
//!   (Tarjan's algorithm): the import circles.
//! * [`code_map`]: the modules ARCHITECTURE.md's code map lists for each crate.
//!
//! Text, not the compiler's view: a path inside a string literal or a macro's body counts
//! like any other. That errs towards more arrows, never fewer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The import graph of one crate's library: files as module paths, arrows between them.
#[derive(Debug, Clone, Default)]
pub struct ModuleGraph {
    /// Every file of the library by module path (`""` is `lib.rs`).
    pub modules: BTreeSet<String>,
    /// For each module, the modules it names.
    pub arrows: BTreeMap<String, BTreeSet<String>>,
}

/// The module path of `file` under `src` (`cases::auth`, `ctx` for `ctx/mod.rs`, `""` for
/// `lib.rs`), `None` for a file outside `src` or not a `.rs` file.
fn module_path(src: &Path, file: &Path) -> Option<Vec<String>> {
    let rel = file.strip_prefix(src).ok()?;
    if rel.extension().is_none_or(|e| e != "rs") {
        return None;
    }
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop()?;
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && !(parts.is_empty() && stem == "lib") {
        parts.push(stem.to_owned());
    }
    Some(parts)
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(std::fs::DirEntry::path);
    for e in entries {
        let path = e.path();
        if path.is_dir() {
            rs_files(&path, out)?;
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// `text` without comments, string literals' contents kept (see the crate doc), and without
/// the trailing `#[cfg(test)]` block.
fn code_of(text: &str) -> String {
    let text = text.split("\n#[cfg(test)]").next().unwrap_or(text);
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut depth = 0usize;
    let mut in_str = false;
    while let Some(c) = chars.next() {
        if depth > 0 {
            if c == '*' && chars.peek() == Some(&'/') {
                chars.next();
                depth -= 1;
            } else if c == '/' && chars.peek() == Some(&'*') {
                chars.next();
                depth += 1;
            }
            continue;
        }
        if in_str {
            if c == '\\' {
                chars.next();
            } else if c == '"' {
                in_str = false;
            }
            out.push(c);
            continue;
        }
        match c {
            '"' => {
                in_str = true;
                out.push(c);
            }
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                depth = 1;
            }
            _ => out.push(c),
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The paths `code` names from `base` (one file's module path): each `crate::`, `super::`
/// and `self::` path resolved to absolute segments, a `{..}` group expanded into one path
/// per item (only each item's leading segments matter).
pub fn named_paths(code: &str, base: &[String]) -> Vec<Vec<String>> {
    let bytes: Vec<char> = code.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !is_ident(bytes[i - 1]) && bytes[i - 1] != ':';
        if !starts_word || !bytes[i].is_ascii_alphabetic() {
            i += 1;
            continue;
        }
        let word: String = bytes[i..].iter().take_while(|c| is_ident(**c)).collect();
        let after = i + word.len();
        let followed = bytes.get(after) == Some(&':') && bytes.get(after + 1) == Some(&':');
        if !followed || !matches!(word.as_str(), "crate" | "super" | "self") {
            i = after.max(i + 1);
            continue;
        }
        let mut prefix: Vec<String> = match word.as_str() {
            "crate" => Vec::new(),
            "self" => base.to_vec(),
            _ => base[..base.len().saturating_sub(1)].to_vec(),
        };
        let mut j = after + 2;
        // Further `super::` segments.
        while bytes[j..].starts_with(&['s', 'u', 'p', 'e', 'r', ':', ':']) {
            prefix.pop();
            j += 7;
        }
        j = tail(&bytes, j, &prefix, &mut found);
        i = j.max(i + 1);
    }
    found
}

/// Reads the rest of a path from `j` (segments, or a `{..}` group) under `prefix`; pushes what
/// it names to `found` and returns where it stopped.
fn tail(bytes: &[char], mut j: usize, prefix: &[String], found: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix.to_vec();
    loop {
        while bytes.get(j).is_some_and(|c| c.is_whitespace()) {
            j += 1;
        }
        if bytes.get(j) == Some(&'{') {
            j += 1;
            loop {
                while bytes.get(j).is_some_and(|c| c.is_whitespace() || *c == ',') {
                    j += 1;
                }
                match bytes.get(j) {
                    None => return j,
                    Some('}') => return j + 1,
                    _ => {}
                }
                let before = j;
                j = tail(bytes, j, &path, found);
                if j == before {
                    j += 1;
                }
            }
        }
        let seg: String = bytes[j.min(bytes.len())..]
            .iter()
            .take_while(|c| is_ident(**c))
            .collect();
        if seg.is_empty() {
            break;
        }
        j += seg.len();
        if seg != "self" {
            path.push(seg);
        }
        if bytes.get(j) == Some(&':') && bytes.get(j + 1) == Some(&':') {
            j += 2;
        } else {
            break;
        }
    }
    found.push(path);
    j
}

impl ModuleGraph {
    /// The graph of the library under `src` (`src/lib.rs` and every file below it; a
    /// binary's own modules, declared only by `main.rs`, are left out when `lib_only`).
    ///
    /// # Errors
    /// Reading a directory or a file failed.
    pub fn of_crate(src: &Path) -> std::io::Result<Self> {
        let mut files = Vec::new();
        rs_files(src, &mut files)?;
        let binary_only = binary_only_modules(src)?;
        let mut texts = BTreeMap::new();
        for f in files {
            let Some(path) = module_path(src, &f) else {
                continue;
            };
            if path.first().is_some_and(|m| binary_only.contains(m))
                || path.first().is_some_and(|m| m == "main" || m == "bin")
            {
                continue;
            }
            texts.insert(path, code_of(&std::fs::read_to_string(&f)?));
        }
        let root_exports = root_exports(texts.get(&Vec::new()).map_or("", String::as_str));
        let mut graph = Self {
            modules: texts.keys().map(|p| p.join("::")).collect(),
            ..Self::default()
        };
        for (path, code) in &texts {
            let me = path.join("::");
            for named in named_paths(code, path) {
                let target = graph.resolve(&named, &root_exports);
                if let Some(t) = target.filter(|t| *t != me && !t.is_empty()) {
                    graph.arrows.entry(me.clone()).or_default().insert(t);
                }
            }
        }
        Ok(graph)
    }

    /// The deepest module `path` runs through; at the root, the module a re-exported name
    /// comes from.
    fn resolve(&self, path: &[String], root_exports: &BTreeMap<String, String>) -> Option<String> {
        let mut best = None;
        for n in 1..=path.len() {
            let candidate = path[..n].join("::");
            if self.modules.contains(&candidate) {
                best = Some(candidate);
            }
        }
        best.or_else(|| {
            path.first()
                .and_then(|first| root_exports.get(first).cloned())
        })
    }

    /// The import circles: every strongly connected component of more than one module,
    /// each sorted, in order of their first module.
    #[must_use]
    pub fn circles(&self) -> Vec<Vec<String>> {
        let mut t = Tarjan {
            graph: self,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on_stack: BTreeSet::new(),
            next: 0,
            found: Vec::new(),
        };
        for m in &self.modules {
            if !t.index.contains_key(m.as_str()) {
                t.visit(m);
            }
        }
        let mut found: Vec<Vec<String>> = t
            .found
            .into_iter()
            .filter(|c| c.len() > 1)
            .map(|mut c| {
                c.sort();
                c
            })
            .collect();
        found.sort();
        found
    }

    /// The top-level module of each module (`cases` for `cases::auth`), and the arrows between
    /// top-level modules (a file's arrows to other files of its own top-level module left out).
    #[must_use]
    pub fn top_level(&self) -> Self {
        let top = |m: &str| m.split("::").next().unwrap_or(m).to_owned();
        let mut g = Self {
            modules: self
                .modules
                .iter()
                .map(|m| top(m))
                .filter(|m| !m.is_empty())
                .collect(),
            ..Self::default()
        };
        for (from, tos) in &self.arrows {
            for to in tos {
                let (f, t) = (top(from), top(to));
                if f != t && !f.is_empty() {
                    g.arrows.entry(f).or_default().insert(t);
                }
            }
        }
        g
    }
}

struct Tarjan<'g> {
    graph: &'g ModuleGraph,
    index: BTreeMap<&'g str, usize>,
    low: BTreeMap<&'g str, usize>,
    stack: Vec<&'g str>,
    on_stack: BTreeSet<&'g str>,
    next: usize,
    found: Vec<Vec<String>>,
}

impl<'g> Tarjan<'g> {
    fn visit(&mut self, v: &'g str) {
        self.index.insert(v, self.next);
        self.low.insert(v, self.next);
        self.next += 1;
        self.stack.push(v);
        self.on_stack.insert(v);
        if let Some(tos) = self.graph.arrows.get(v) {
            for w in tos {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low[v];
                    self.low.insert(v, lv.min(lw));
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low[v];
                    self.low.insert(v, lv.min(iw));
                }
            }
        }
        if self.low[v] == self.index[v] {
            let mut component = Vec::new();
            while let Some(w) = self.stack.pop() {
                self.on_stack.remove(w);
                component.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            self.found.push(component);
        }
    }
}

/// Names `lib.rs` re-exports from its modules (`pub use relay::{Relay, Output}`), each with
/// the top-level module it comes from.
fn root_exports(lib: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for stmt in lib.split(';') {
        let stmt = stmt.trim();
        let Some(rest) = stmt
            .strip_prefix("pub use ")
            .or_else(|| stmt.strip_prefix("pub(crate) use "))
        else {
            continue;
        };
        let rest = rest
            .trim()
            .trim_start_matches("crate::")
            .trim_start_matches("self::");
        for path in named_paths(&format!("crate::{rest}"), &[]) {
            if let (Some(module), Some(name)) = (path.first(), path.last()) {
                out.insert(name.clone(), module.clone());
            }
        }
    }
    out
}

/// Top-level modules declared by `main.rs` but not by `lib.rs` (a binary's own modules).
fn binary_only_modules(src: &Path) -> std::io::Result<BTreeSet<String>> {
    let declared = |file: &str| -> std::io::Result<BTreeSet<String>> {
        let path = src.join(file);
        if !path.exists() {
            return Ok(BTreeSet::new());
        }
        Ok(code_of(&std::fs::read_to_string(path)?)
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                let l = l
                    .strip_prefix("pub(crate) ")
                    .or_else(|| l.strip_prefix("pub "))
                    .unwrap_or(l);
                l.strip_prefix("mod ")?.strip_suffix(';').map(str::to_owned)
            })
            .collect())
    };
    let lib = declared("lib.rs")?;
    Ok(declared("main.rs")?.difference(&lib).cloned().collect())
}

/// What ARCHITECTURE.md's code map lists: for each crate (a row whose first cell is the
/// crate's bold name), the modules of its rows (each backticked name of a first cell outside
/// parentheses, its crate prefix and `.rs` dropped), with the backticked names of the "May
/// import" cell.
#[must_use]
pub fn code_map(architecture_md: &str) -> BTreeMap<String, Vec<MapRow>> {
    let mut out: BTreeMap<String, Vec<MapRow>> = BTreeMap::new();
    let Some(start) = architecture_md.find("## Code map") else {
        return out;
    };
    let section = &architecture_md[start..];
    let section = section[3..]
        .find("\n## ")
        .map_or(section, |end| &section[..end + 3]);
    let mut krate: Option<String> = None;
    for line in section.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 4 || !line.starts_with('|') {
            continue;
        }
        let (where_, may) = (cells[1], cells[3]);
        if let Some(name) = where_.strip_prefix("**") {
            let name = name.split("**").next().unwrap_or(name);
            krate = Some(name.split_whitespace().next().unwrap_or(name).to_owned());
            continue;
        }
        let Some(k) = &krate else { continue };
        let modules = backticked(&without_parentheses(where_))
            .into_iter()
            .map(|m| {
                let m = m
                    .strip_prefix(&format!("{}::", k.replace('-', "_")))
                    .unwrap_or(&m)
                    .to_owned();
                m.trim_end_matches(".rs").to_owned()
            })
            .collect();
        out.entry(k.clone()).or_default().push(MapRow {
            modules,
            may_import: backticked(may),
            may_import_text: may.to_owned(),
        });
    }
    out
}

/// One row of the code map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapRow {
    /// The modules the row is about.
    pub modules: Vec<String>,
    /// The backticked names of its "May import" cell.
    pub may_import: Vec<String>,
    /// The whole "May import" cell.
    pub may_import_text: String,
}

fn without_parentheses(s: &str) -> String {
    let mut depth = 0usize;
    s.chars()
        .filter(|c| {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth = depth.saturating_sub(1);
                    return false;
                }
                _ => {}
            }
            depth == 0
        })
        .collect()
}

fn backticked(s: &str) -> Vec<String> {
    s.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, t)| t.trim().to_owned())
        .filter(|t| !t.is_empty())
        .collect()
}

/// One function of a source file and its length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FnLength {
    /// The file, relative to the crate's `src`.
    pub file: String,
    /// The function's name.
    pub name: String,
    /// Lines from its `fn` line to its closing brace, both included.
    pub lines: usize,
    /// Whether a comment right above it (or its doc) says why it is long: a line with
    /// `long on purpose:`.
    pub explained: bool,
}

/// Every function with a body in the non-test code of the `.rs` files under `src` (a file's
/// trailing `#[cfg(test)]` block left out), with its length in lines.
///
/// # Errors
/// Reading a directory or a file failed.
pub fn function_lengths(src: &Path) -> std::io::Result<Vec<FnLength>> {
    let mut out = Vec::new();
    for (rel, text) in sources(src)? {
        out.extend(functions_of(&rel, &text));
    }
    Ok(out)
}

/// Every `.rs` file under `src` with its path relative to `src`, and its text.
fn sources(src: &Path) -> std::io::Result<Vec<(String, String)>> {
    let mut files = Vec::new();
    rs_files(src, &mut files)?;
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f)?;
            let rel = f
                .strip_prefix(src)
                .unwrap_or(&f)
                .to_string_lossy()
                .into_owned();
            Ok((rel, text))
        })
        .collect()
}

/// The `select!` invocations of the non-test code of the `.rs` files under `src`, each as
/// `file:line` with whether it starts with `biased;`. An unbiased `tokio::select!` picks among
/// ready branches with an unseeded random number, so a simulated run that reaches one with two
/// branches ready no longer replays from its seed.
///
/// # Errors
/// Reading a directory or a file failed.
pub fn selects(src: &Path) -> std::io::Result<Vec<(String, bool)>> {
    let mut out = Vec::new();
    for (rel, text) in sources(src)? {
        out.extend(
            selects_of(&code_of(&text))
                .into_iter()
                .map(|(line, biased)| (format!("{rel}:{line}"), biased)),
        );
    }
    Ok(out)
}

/// The `select!` invocations of `code` (comments already out): each line and whether its
/// first token is `biased;`.
fn selects_of(code: &str) -> Vec<(usize, bool)> {
    let mut out = Vec::new();
    let mut rest = code;
    let mut offset = 0;
    while let Some(i) = rest.find("select!") {
        let after = rest[i + 7..].trim_start();
        if let Some(body) = after.strip_prefix(['{', '(']) {
            let line = code[..offset + i].matches('\n').count() + 1;
            out.push((line, body.trim_start().starts_with("biased;")));
        }
        offset += i + 7;
        rest = &rest[i + 7..];
    }
    out
}

/// The functions of one file's text (see [`function_lengths`]).
#[must_use]
pub fn functions_of(file: &str, text: &str) -> Vec<FnLength> {
    let text = text.split("\n#[cfg(test)]").next().unwrap_or(text);
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = fn_name(line) else {
            continue;
        };
        // The body: from the first `{` at or after the signature to its matching `}`
        // (braces in strings, chars and comments are rare enough in signatures and bodies
        // of this workspace to count them as text).
        let mut depth = 0i64;
        let mut opened = false;
        let mut end = None;
        'scan: for (j, l) in lines.iter().enumerate().skip(i) {
            let code = l.split("//").next().unwrap_or(l);
            for c in code.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    ';' if !opened && depth == 0 => break 'scan,
                    _ => {}
                }
                if opened && depth == 0 {
                    end = Some(j);
                    break 'scan;
                }
            }
        }
        let Some(end) = end else { continue };
        let explained = lines[..i]
            .iter()
            .rev()
            .take_while(|l| {
                let t = l.trim_start();
                t.starts_with("//") || t.starts_with("#[")
            })
            .any(|l| l.to_lowercase().contains("long on purpose:"));
        out.push(FnLength {
            file: file.to_owned(),
            name,
            lines: end - i + 1,
            explained,
        });
    }
    out
}

/// The name of the function a line declares (`fn`, with any of `pub`, `pub(crate)`,
/// `async`, `const`, `unsafe`, `extern "C"` before it).
fn fn_name(line: &str) -> Option<String> {
    let mut rest = line.trim_start();
    loop {
        let before = rest;
        for q in [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "async ",
            "const ",
            "unsafe ",
            "extern \"C\" ",
        ] {
            if let Some(r) = rest.strip_prefix(q) {
                rest = r;
            }
        }
        if rest == before {
            break;
        }
    }
    let rest = rest.strip_prefix("fn ")?;
    let name: String = rest.chars().take_while(|c| is_ident(*c)).collect();
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn paths_are_read_through_groups_super_and_self() {
        let code = "use crate::{a::B, c, d::{e::F, G}};\nuse super::super::h::I;\nfn f() { self::j::k(); crate::l::M::new(); x::crate_like(); }";
        let got = named_paths(code, &v(&["p", "q", "r"]));
        assert_eq!(
            got,
            vec![
                v(&["a", "B"]),
                v(&["c"]),
                v(&["d", "e", "F"]),
                v(&["d", "G"]),
                v(&["p", "h", "I"]),
                v(&["p", "q", "r", "j", "k"]),
                v(&["l", "M", "new"]),
            ]
        );
    }

    #[test]
    fn comments_and_tests_are_not_code() {
        let code = code_of(
            "use crate::a; // crate::b\n/* crate::c /* nested */ crate::d */ let s = \"//x\"; crate::e::f();\n#[cfg(test)]\nmod tests { use crate::g; }",
        );
        let got = named_paths(&code, &[]);
        assert_eq!(got, vec![v(&["a"]), v(&["e", "f"])]);
    }

    #[test]
    fn circles_are_components_of_more_than_one_module() {
        let mut g = ModuleGraph::default();
        for m in ["a", "b", "c", "d"] {
            g.modules.insert(m.to_owned());
        }
        for (f, t) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
            g.arrows
                .entry(f.to_owned())
                .or_default()
                .insert(t.to_owned());
        }
        assert_eq!(g.circles(), vec![v(&["a", "b", "c"])]);
    }

    #[test]
    fn the_code_map_is_read_per_crate() {
        let md = "# x\n## Code map\n| Where | Owns | May import |\n|---|---|---|\n| **relay-core** | rules | `wire` |\n| `relay` (`Relay`) | dispatcher | every sub-machine |\n| `a`, `b.rs` | things | `state`, `http` |\n## Next\n| **other** | x | y |\n";
        let map = code_map(md);
        assert_eq!(map.len(), 1);
        let rows = &map["relay-core"];
        assert_eq!(rows[0].modules, v(&["relay"]));
        assert_eq!(rows[1].modules, v(&["a", "b"]));
        assert_eq!(rows[1].may_import, v(&["state", "http"]));
    }
    #[test]
    fn selects_are_found_with_their_bias() {
        let code = "fn f() {\n    tokio::select! {\n        biased;\n        _ = a => {}\n    }\n    tokio::select! { _ = b => {} }\n    let s = \"select!\";\n}\n";
        assert_eq!(selects_of(code), vec![(2, true), (6, false)]);
    }

    #[test]
    fn functions_are_measured_from_fn_to_their_closing_brace() {
        let text = "fn a() {\n    let x = 1;\n}\n\n/// Long on purpose: a table.\npub(crate) async fn b(\n    x: u8,\n) -> u8 {\n    x\n}\ntrait T { fn c(&self); }\n#[cfg(test)]\nmod tests { fn d() {} }\n";
        let got = functions_of("f.rs", text);
        let got: Vec<(&str, usize, bool)> = got
            .iter()
            .map(|f| (f.name.as_str(), f.lines, f.explained))
            .collect();
        assert_eq!(got, vec![("a", 3, false), ("b", 5, true)]);
    }
}
