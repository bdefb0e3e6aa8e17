//! `github.com/distribution/reference.Parse` (v0.6.0), as TWC reads it for the image part of a
//! build ID: the tag if there is one, else the digest's hex, else the repository path.
//!
//! Go's grammar, in words:
//! - A reference is `name[:tag][@digest]`.
//! - A name is an optional domain followed by `/`, then path components separated by `/`. A
//!   path component is lowercase letters and digits, with single `.` or `_`, a double `__`, or
//!   any run of `-` between them. A domain is dot-separated labels of letters (either case),
//!   digits and inner `-`, or a bracketed IPv6 address, with an optional `:port`.
//! - `Parse` does not normalize: whenever the part before the first `/` can be a domain, it is
//!   one (`library/busybox` has the path `busybox`; `UPPER/x` is valid, with the path `x`).
//! - A tag is 1 to 128 of `[A-Za-z0-9_.-]`, not starting with `.` or `-`.
//! - A digest is `algorithm:hex`, where the grammar allows any algorithm and 32 or more hex
//!   digits, but the digest must then be one of sha256, sha384 or sha512 with exactly 64, 96 or
//!   128 lowercase hex digits.
//! - The path (without the domain) may be at most 255 characters.
//! - A reference with a tag is "tagged" even when it also has a digest.

/// What TWC takes from an image string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageRef<'a> {
    /// The image has a tag (it may also have a digest).
    Tag(&'a str),
    /// The image has a digest and no tag: the digest's hex part.
    Digest(&'a str),
    /// The image is a bare repository: its path without the domain.
    Path(&'a str),
    /// `reference.Parse` fails (empty, uppercase path, bad format, too long, bad digest): TWC
    /// then uses the raw image string.
    Invalid,
}

impl<'a> ImageRef<'a> {
    /// The string TWC puts in front of the template hash: the tag, digest hex or path, or the raw
    /// image when it does not parse.
    pub fn prefix(self, raw: &'a str) -> &'a str {
        match self {
            ImageRef::Tag(s) | ImageRef::Digest(s) | ImageRef::Path(s) => s,
            ImageRef::Invalid => raw,
        }
    }
}

/// Longest path Go accepts.
const PATH_MAX: usize = 255;

/// Parses an image reference exactly as Go's `reference.Parse` does.
pub fn parse(s: &str) -> ImageRef<'_> {
    let (name_and_tag, digest) = match s.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (s, None),
    };
    if let Some(d) = digest
        && !digest_pattern(d)
    {
        return ImageRef::Invalid;
    }
    let last_slash = name_and_tag.rfind('/');
    let (name, tag) = match name_and_tag.rfind(':') {
        Some(c) if last_slash.is_none_or(|sl| c > sl) => {
            (&name_and_tag[..c], Some(&name_and_tag[c + 1..]))
        }
        _ => (name_and_tag, None),
    };
    if let Some(t) = tag
        && !is_tag(t)
    {
        return ImageRef::Invalid;
    }
    let Some(path) = split_name(name) else {
        return ImageRef::Invalid;
    };
    if path.len() > PATH_MAX {
        return ImageRef::Invalid;
    }
    if let Some(d) = digest
        && !digest_supported(d)
    {
        return ImageRef::Invalid;
    }
    match (tag, digest) {
        (Some(t), _) => ImageRef::Tag(t),
        (None, Some(d)) => d
            .split_once(':')
            .map_or(ImageRef::Invalid, |(_, hex)| ImageRef::Digest(hex)),
        (None, None) => ImageRef::Path(path),
    }
}

/// The path of a valid name (the domain removed when the first component can be a domain).
fn split_name(name: &str) -> Option<&str> {
    if let Some((domain, rest)) = name.split_once('/')
        && is_domain_and_port(domain)
        && is_remote_name(rest)
    {
        return Some(rest);
    }
    is_remote_name(name).then_some(name)
}

fn is_remote_name(s: &str) -> bool {
    s.split('/').all(is_path_component)
}

/// `[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*`
fn is_path_component(s: &str) -> bool {
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let b = s.as_bytes();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &s[start..i];
        let ok = matches!(sep, "." | "_" | "__") || sep.bytes().all(|c| c == b'-');
        if !ok {
            return false;
        }
    }
    true
}

/// `(?:domainName|\[[a-fA-F0-9:]+\])(?::[0-9]+)?`
fn is_domain_and_port(s: &str) -> bool {
    let (host, port) = if s.starts_with('[') {
        match s.find(']') {
            Some(end) => (&s[..=end], &s[end + 1..]),
            None => return false,
        }
    } else {
        match s.find(':') {
            Some(c) => (&s[..c], &s[c..]),
            None => (s, ""),
        }
    };
    let port_ok = port.is_empty()
        || (port.len() > 1
            && port.starts_with(':')
            && port[1..].bytes().all(|c| c.is_ascii_digit()));
    let host_ok = if let Some(inner) = host.strip_prefix('[') {
        let inner = inner.strip_suffix(']').unwrap_or("");
        !inner.is_empty() && inner.bytes().all(|c| c.is_ascii_hexdigit() || c == b':')
    } else {
        host.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
    };
    port_ok && host_ok
}

/// `[\w][\w.-]{0,127}`
fn is_tag(s: &str) -> bool {
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && word(b[0])
        && b.iter().all(|c| word(*c) || *c == b'.' || *c == b'-')
}

/// `[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][[:xdigit:]]{32,}`
fn digest_pattern(s: &str) -> bool {
    let Some((alg, hex)) = s.split_once(':') else {
        return false;
    };
    let alg_ok = alg.split(['-', '_', '+', '.']).all(|part| {
        let b = part.as_bytes();
        !b.is_empty() && b[0].is_ascii_alphabetic() && b.iter().all(u8::is_ascii_alphanumeric)
    });
    alg_ok && hex.len() >= 32 && hex.bytes().all(|c| c.is_ascii_hexdigit())
}

/// go-digest's validation: a known algorithm and its exact length of lowercase hex.
fn digest_supported(s: &str) -> bool {
    let Some((alg, hex)) = s.split_once(':') else {
        return false;
    };
    let len = match alg {
        "sha256" => 64,
        "sha384" => 96,
        "sha512" => 128,
        _ => return false,
    };
    hex.len() == len
        && hex
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}
