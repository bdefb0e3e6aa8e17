//! The source's shape, checked: no import cycle between the controller's files or between its
//! modules, and no hand-written source file in the workspace longer than [`MAX_LINES`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest a hand-written source file may be (generated files say `@generated`).
const MAX_LINES: usize = 600;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name()
                .is_some_and(|n| n != "target" && n != "fixtures")
            {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a file under `src` (`plan/mod.rs` -> `plan`, `lib.rs` -> ``).
fn module_of(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
        parts.pop();
    }
    parts
}

/// The file of the longest prefix of `path` that is a module with a file of its own.
fn file_of(files: &BTreeMap<String, String>, path: &[String]) -> Option<String> {
    (1..=path.len()).rev().find_map(|n| {
        let pre = path[..n].join("/");
        [format!("{pre}.rs"), format!("{pre}/mod.rs")]
            .into_iter()
            .find(|c| files.contains_key(c))
    })
}

/// The files each file imports from (`crate::` and `super::` paths, outside comments and
/// tests).
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut paths = Vec::new();
    rust_files(src, &mut paths);
    let files: BTreeMap<String, String> = paths
        .iter()
        .filter_map(|p| {
            let rel = p.strip_prefix(src).ok()?.to_string_lossy().into_owned();
            let text = std::fs::read_to_string(p).ok()?;
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            let code: Vec<&str> = code
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect();
            Some((rel, code.join("\n")))
        })
        .collect();
    let mut edges = BTreeMap::new();
    for (rel, code) in &files {
        let me = module_of(rel);
        let mut deps = BTreeSet::new();
        for (prefix, base) in [
            ("crate::", Vec::new()),
            ("super::", me[..me.len().saturating_sub(1)].to_vec()),
        ] {
            for (i, _) in code.match_indices(prefix) {
                let before = code[..i].chars().last();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    continue;
                }
                let rest = &code[i + prefix.len()..];
                let path: Vec<String> = rest
                    .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .next()
                    .unwrap_or_default()
                    .split("::")
                    .take_while(|s| s.chars().next().is_some_and(|c| c.is_lowercase()))
                    .map(String::from)
                    .collect();
                let mut full = base.clone();
                full.extend(path);
                if let Some(f) = file_of(&files, &full).filter(|f| f != rel) {
                    deps.insert(f);
                }
            }
        }
        edges.insert(rel.clone(), deps);
    }
    edges
}

/// Every cycle's files: the strongly connected components of more than one.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(f) = todo.pop() {
            for d in edges.get(&f).into_iter().flatten() {
                if seen.insert(d.clone()) {
                    todo.push(d.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> =
        edges.keys().map(|f| (f, reach(f))).collect();
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for (f, r) in &reached {
        let comp: BTreeSet<String> = r
            .iter()
            .filter(|g| reached.get(g).is_some_and(|rg| rg.contains(*f)))
            .cloned()
            .collect();
        if comp.len() > 1 && !out.contains(&comp) {
            out.push(comp);
        }
    }
    out
}

#[test]
fn no_import_cycle_between_files_or_modules() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = imports(&src);
    assert!(edges.len() > 40, "read {} files", edges.len());
    let files = cycles(&edges);
    assert!(files.is_empty(), "files importing each other: {files:?}");
    let top = |f: &str| {
        f.split('/')
            .next()
            .unwrap_or_default()
            .trim_end_matches(".rs")
            .to_string()
    };
    let mut modules: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (f, deps) in &edges {
        for d in deps.iter().filter(|d| top(d) != top(f)) {
            modules.entry(top(f)).or_default().insert(top(d));
        }
    }
    let modules = cycles(&modules);
    assert!(
        modules.is_empty(),
        "modules importing each other: {modules:?}"
    );
}

#[test]
fn no_hand_written_source_file_is_longer_than_the_limit() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut paths = Vec::new();
    for dir in ["crates", "src", "examples"] {
        rust_files(&workspace.join(dir), &mut paths);
    }
    assert!(paths.len() > 100, "read {} files", paths.len());
    let long: Vec<String> = paths
        .iter()
        .filter_map(|p| {
            let text = std::fs::read_to_string(p).ok()?;
            let generated = text.lines().take(5).any(|l| l.contains("@generated"));
            let lines = text.lines().count();
            (!generated && lines > MAX_LINES).then(|| format!("{} ({lines})", p.display()))
        })
        .collect();
    assert!(long.is_empty(), "longer than {MAX_LINES} lines: {long:?}");
}
