//! The shape of `src/` that issue 15 set and that nothing should undo silently: no source file
//! over 800 lines, every folder opening with a comment that says what lives there, and no import
//! circle between files of different folders (a file "imports" another when it names it through a
//! `crate::`, `super::` or `self::` path).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 800;

/// Every `.rs` file under `src/` with its module path (`src/store/mod.rs` → `["store"]`).
fn modules() -> BTreeMap<Vec<String>, PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&root, &mut files);
    let mut map = BTreeMap::new();
    for file in files {
        let rel = file
            .strip_prefix(&root)
            .expect("under src")
            .with_extension("");
        let mut path: Vec<String> = rel
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        if path.first().is_some_and(|p| p == "bin") {
            continue;
        }
        if path.last().is_some_and(|p| p == "mod") || path == ["lib"] || path == ["main"] {
            path.pop();
        }
        map.insert(path, file);
    }
    map
}

/// The source without comments and with every string and char literal emptied, so paths in
/// prose or in SQL don't count.
fn code_only(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && next == Some('*') {
            while i + 1 < c.len() && !(c[i] == '*' && c[i + 1] == '/') {
                i += 1;
            }
            i += 2;
        } else if c[i] == 'r' && matches!(next, Some('#' | '"')) && !prev_is_ident(&c, i) {
            // r"…", r#"…"#: ends at a quote followed by as many #.
            let hashes = c[i + 1..].iter().take_while(|&&h| h == '#').count();
            if c.get(i + 1 + hashes) != Some(&'"') {
                out.push(c[i]);
                i += 1;
                continue;
            }
            i += hashes + 2;
            while i < c.len()
                && !(c[i] == '"'
                    && c[i + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&h| h == '#')
                        .count()
                        == hashes)
            {
                i += 1;
            }
            i += hashes + 1;
            out.push_str("\"\"");
        } else if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c[i] == '\'' && next == Some('\\') {
            // '\n', '\'', '\u{…}'
            i += 2;
            while i < c.len() && c[i] != '\'' {
                i += 1;
            }
            i += 1;
        } else if c[i] == '\'' && c.get(i + 2) == Some(&'\'') {
            i += 3; // 'x' (a lifetime has no closing quote there)
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

fn prev_is_ident(c: &[char], i: usize) -> bool {
    i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_')
}

/// Every path that starts with `crate`, `super` or `self`, use-groups expanded:
/// `use crate::{a::b, c::{d, e}}` gives `crate::a::b`, `crate::c::d`, `crate::c::e`.
fn paths(code: &str) -> Vec<Vec<String>> {
    let bytes = code.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !ident(bytes[i]) || (i > 0 && (ident(bytes[i - 1]) || bytes[i - 1] == b':')) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && ident(bytes[i]) {
            i += 1;
        }
        let head = &code[start..i];
        if matches!(head, "crate" | "super" | "self") && code[i..].starts_with("::") {
            let (mut list, end) = path_tail(code, i, vec![head.to_string()]);
            found.append(&mut list);
            i = end;
        }
    }
    found
}

/// Reads `::seg::seg` or `::{…}` from `at`, with `prefix` already read; returns the paths and
/// where reading stopped.
fn path_tail(code: &str, mut at: usize, mut prefix: Vec<String>) -> (Vec<Vec<String>>, usize) {
    let bytes = code.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    while code[at..].starts_with("::") {
        at += 2;
        if bytes.get(at) == Some(&b'{') {
            let mut depth = 0;
            let mut end = at;
            for (k, b) in bytes[at..].iter().enumerate() {
                match b {
                    b'{' => depth += 1,
                    b'}' => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    end = at + k;
                    break;
                }
            }
            let mut out = Vec::new();
            for item in split_top(&code[at + 1..end]) {
                let item = item.trim();
                let name_end = item.find(|c: char| !(c.is_alphanumeric() || c == '_'));
                let name = &item[..name_end.unwrap_or(item.len())];
                if name.is_empty() {
                    continue;
                }
                let mut p = prefix.clone();
                if name != "self" {
                    p.push(name.to_string());
                }
                let rest = &item[name.len()..];
                if rest.starts_with("::") {
                    out.extend(path_tail(rest, 0, p).0);
                } else {
                    out.push(p);
                }
            }
            return (out, end + 1);
        }
        let seg_start = at;
        while at < bytes.len() && ident(bytes[at]) {
            at += 1;
        }
        if at == seg_start {
            break;
        }
        prefix.push(code[seg_start..at].to_string());
    }
    (vec![prefix], at)
}

fn split_top(s: &str) -> Vec<&str> {
    let (mut depth, mut last, mut out) = (0, 0, Vec::new());
    for (k, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[last..k]);
                last = k + 1;
            }
            _ => {}
        }
    }
    out.push(&s[last..]);
    out
}

/// The file-to-file import graph of `src/`.
fn graph() -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let mods = modules();
    let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for (module, file) in &mods {
        let code = code_only(&std::fs::read_to_string(file).expect("read source"));
        edges.entry(file.clone()).or_default();
        for path in paths(&code) {
            let (head, rest) = path.split_first().expect("a head");
            let mut full: Vec<String> = match head.as_str() {
                "crate" => Vec::new(),
                "self" => module.clone(),
                _ => module[..module.len().saturating_sub(1)].to_vec(),
            };
            let mut rest = rest;
            while rest.first().is_some_and(|s| s == "super") {
                full.pop();
                rest = &rest[1..];
            }
            full.extend(rest.iter().cloned());
            // The longest prefix that is a module file is the file this path names.
            let target = (1..=full.len()).rev().find_map(|k| mods.get(&full[..k]));
            if let Some(target) = target.filter(|t| *t != file) {
                edges
                    .get_mut(file)
                    .expect("inserted")
                    .insert(target.clone());
            }
        }
    }
    edges
}

/// Strongly connected components (Tarjan), each as a sorted list of files.
fn cycles(edges: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'a PathBuf, (usize, usize)>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        found: Vec<Vec<PathBuf>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a PathBuf) {
            let n = self.index.len();
            self.index.insert(v, (n, n));
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in &self.edges[v] {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.index[w].1.min(self.index[v].1);
                    self.index.get_mut(v).expect("visited").1 = low;
                } else if self.on_stack.contains(w) {
                    let low = self.index[w].0.min(self.index[v].1);
                    self.index.get_mut(v).expect("visited").1 = low;
                }
            }
            if self.index[v].0 == self.index[v].1 {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                component.sort();
                self.found.push(component);
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found
}

#[test]
fn no_import_circle_spans_two_folders() {
    let edges = graph();
    let mut report = String::new();
    for component in cycles(&edges) {
        let folders: BTreeSet<_> = component.iter().filter_map(|f| f.parent()).collect();
        if folders.len() > 1 {
            report.push_str("circle:\n");
            for file in &component {
                let inside: Vec<_> = edges[file]
                    .iter()
                    .filter(|t| component.contains(t))
                    .collect();
                report.push_str(&format!("  {} -> {inside:?}\n", file.display()));
            }
        }
    }
    assert!(
        report.is_empty(),
        "import circles between folders:\n{report}"
    );
}

#[test]
fn the_checker_sees_a_circle_through_a_use_group() {
    // The checker itself: a group import and a super path are both read as edges.
    let code = code_only(
        "use crate::{a::b, c::{d, self}}; // crate::x\nlet s = \"crate::y\"; super::z::f();",
    );
    let found = paths(&code);
    let want: Vec<Vec<String>> = [
        &["crate", "a", "b"][..],
        &["crate", "c", "d"],
        &["crate", "c"],
        &["super", "z", "f"],
    ]
    .iter()
    .map(|p| p.iter().map(|s| s.to_string()).collect())
    .collect();
    assert_eq!(found, want);
    let two = BTreeMap::from([
        (
            PathBuf::from("src/a/x.rs"),
            BTreeSet::from([PathBuf::from("src/b.rs")]),
        ),
        (
            PathBuf::from("src/b.rs"),
            BTreeSet::from([PathBuf::from("src/a/x.rs")]),
        ),
    ]);
    assert!(cycles(&two).iter().any(|c| c.len() == 2));
}

#[test]
fn no_source_file_is_over_800_lines() {
    let long: Vec<String> = modules()
        .values()
        .filter_map(|file| {
            let lines = std::fs::read_to_string(file).expect("read").lines().count();
            (lines > MAX_LINES).then(|| format!("{} ({lines} lines)", file.display()))
        })
        .collect();
    assert!(long.is_empty(), "split by what each part owns: {long:?}");
}

#[test]
fn every_folder_says_what_lives_there() {
    let silent: Vec<String> = modules()
        .values()
        .filter(|file| file.file_name().is_some_and(|n| n == "mod.rs"))
        .filter(|file| {
            let src = std::fs::read_to_string(file).expect("read");
            !src.trim_start().starts_with("//!")
        })
        .map(|file| file.display().to_string())
        .collect();
    assert!(
        silent.is_empty(),
        "open these with a //! comment: {silent:?}"
    );
}
