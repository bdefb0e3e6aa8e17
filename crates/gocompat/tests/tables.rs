//! The Go-generated tables (hack/gofields) against this crate.

use twc_gocompat::{ImageRef, canonical, parse_reference};

fn rows(text: &str) -> impl Iterator<Item = Vec<&str>> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split('\t').collect())
}

#[test]
fn quantities_match_go() {
    let mut failures = Vec::new();
    let mut n = 0;
    for row in rows(include_str!("data/quantities.tsv")) {
        n += 1;
        let (input, want, want_json) = (row[0], row[1], row[2]);
        let got = canonical(input);
        match (want, &got) {
            ("!error", Err(_)) => {}
            (want, Ok(got)) if want == got && want_json == format!("\"{got}\"") => {}
            _ => failures.push(format!("{input:?}: go {want}, ours {got:?}")),
        }
    }
    assert!(n > 800, "{n} rows");
    assert!(
        failures.is_empty(),
        "{} of {n} differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Reads a Go `%q` string (the table uses it for inputs with tabs or quotes).
fn unquote(s: &str) -> String {
    let inner = &s[1..s.len() - 1];
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

#[test]
fn references_match_go() {
    let mut failures = Vec::new();
    let mut n = 0;
    for row in rows(include_str!("data/references.tsv")) {
        n += 1;
        let input = unquote(row[0]);
        let got = parse_reference(&input);
        let ok = match (row[1], &got) {
            ("tag", ImageRef::Tag(v))
            | ("digest", ImageRef::Digest(v))
            | ("path", ImageRef::Path(v)) => *v == row[2],
            ("error", ImageRef::Invalid) => true,
            _ => false,
        };
        if !ok {
            failures.push(format!("{input:?}: go {} {}, ours {got:?}", row[1], row[2]));
        }
    }
    assert!(n > 70, "{n} rows");
    assert!(
        failures.is_empty(),
        "{} of {n} differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Random templates (hack/gofields, fixed seed): keys sorted, nulls, empty and nil lists and
/// maps, unknown keys, quantities in odd spellings, strings with every escape Go makes.
#[test]
fn random_templates_match_go() {
    let mut n = 0;
    for line in include_str!("data/templates.jsonl").lines() {
        n += 1;
        let case: serde_json::Value = serde_json::from_str(line).expect("valid JSON line");
        let want = case["go"].as_str().expect("go");
        let got = twc_gocompat::pod_template_spec(&case["input"]);
        assert_eq!(
            got.as_deref(),
            Ok(want),
            "template {n}: input {}",
            case["input"]
        );
    }
    assert_eq!(n, 40);
}
