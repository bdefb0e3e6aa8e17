//! The bytes Go's `json.Marshal` writes for a `corev1.PodTemplateSpec`, computed from the JSON
//! Go would decode it from.
//!
//! Go's rules, as this module applies them:
//! - Decoding. Keys match fields exactly or, failing that, ignoring ASCII case (plus the two
//!   non-ASCII letters Go folds onto ASCII ones, `ſ` and the Kelvin sign). Unknown keys are
//!   dropped. A missing key or a JSON `null` leaves the Go zero value, except that `null` makes
//!   a pointer, slice or map nil; a `null` quantity is the zero quantity and a `null`
//!   int-or-string is the integer 0 (their own decoders run on `null`). A value of the wrong
//!   JSON type is an error: Go refuses `"1"` for an integer, `1.0` or `1e3` for an integer, a
//!   number outside the integer's width, a string for a bool, and so on.
//! - Encoding. Fields in Go declaration order, embedded structs flattened in place. `omitempty`
//!   drops `""`, `0`, `false`, nil pointers and empty (or nil) slices and maps, and never a
//!   struct (so `"metadata":{}` and `"resources":{}` stay). `omitzero` drops the zero value,
//!   using the type's `IsZero` method when it has one (quantities, times). A nil slice or map
//!   is `null`, an empty one `[]` or `{}`. Map keys are sorted bytewise. Strings escape `"`,
//!   `\`, `\b`, `\f`, `\n`, `\r`, `\t`, other control characters as `\u00XX` (lowercase hex),
//!   `<`, `>`, `&` as `\u003c`, `\u003e`, `\u0026`, and U+2028, U+2029 as `\u2028`, `\u2029`;
//!   everything else, DEL and non-ASCII included, is written as is.
//!
//! Known gaps, all outside what the apiserver or k8s-openapi produce: when several keys of one
//! object fold onto the same field, the last one in the map's order is taken whole (Go would
//! merge objects); a quantity given as a JSON number is read from serde_json's text for it, so
//! `1e3` reads as `1000.0`; quantity strings must not need JSON escapes (Go would see the
//! backslash and refuse them); `metadata.managedFields[].fieldsV1` is written from the parsed
//! value (key order of the map, Go's escaping) where Go writes its raw bytes.

use std::fmt;

use serde_json::{Map, Value};

use crate::fields::POD_TEMPLATE_SPEC;
use crate::quantity;
use crate::schema::{StructDef, Ty};
use crate::time::{self, Instant};

/// A value Go's decoder would refuse, with the JSON path to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoJsonError {
    /// Where, e.g. `spec.containers[0].resources.limits.cpu` (empty for the root).
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for GoJsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for GoJsonError {}

/// Go's `json.Marshal` of the `corev1.PodTemplateSpec` that Go's `json.Unmarshal` makes of `v`.
pub fn pod_template_spec(v: &Value) -> Result<String, GoJsonError> {
    marshal(&POD_TEMPLATE_SPEC, v)
}

/// Go's `json.Marshal` of the struct `def` decoded from `v`.
pub fn marshal(def: &'static StructDef, v: &Value) -> Result<String, GoJsonError> {
    let mut path = String::new();
    let go = decode_struct(def, v, &mut path)?;
    let mut out = String::new();
    encode(&go, &mut out);
    Ok(out)
}

/// A decoded Go value.
#[derive(Debug)]
enum Go {
    String(String),
    Bool(bool),
    Int(i64),
    /// Canonical string; the zero quantity is "0".
    Quantity(String),
    IntOrStringInt(i32),
    IntOrStringStr(String),
    /// `None` is the zero time.
    Time(Option<Instant>),
    /// `None` is nil raw bytes.
    FieldsV1(Option<Value>),
    Struct(&'static StructDef, Vec<Go>),
    Ptr(&'static Ty, Option<Box<Go>>),
    Slice(Option<Vec<Go>>),
    Map(Option<Vec<(String, Go)>>),
}

fn err(path: &str, message: impl Into<String>) -> GoJsonError {
    GoJsonError {
        path: path.to_string(),
        message: message.into(),
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn mismatch(path: &str, v: &Value, go_type: &str) -> GoJsonError {
    err(
        path,
        format!(
            "cannot unmarshal {} into Go value of type {go_type}",
            json_kind(v)
        ),
    )
}

fn zero(ty: &'static Ty) -> Go {
    match ty {
        Ty::String => Go::String(String::new()),
        Ty::Bool => Go::Bool(false),
        Ty::Int(_) => Go::Int(0),
        Ty::Quantity => Go::Quantity("0".to_string()),
        Ty::IntOrString => Go::IntOrStringInt(0),
        Ty::Time => Go::Time(None),
        Ty::FieldsV1 => Go::FieldsV1(None),
        Ty::Struct(def) => Go::Struct(def, def.fields.iter().map(|f| zero(f.ty)).collect()),
        Ty::Ptr(elem) => Go::Ptr(elem, None),
        Ty::Slice(_) => Go::Slice(None),
        Ty::Map(_) => Go::Map(None),
    }
}

/// Go's `foldName` for one character: ASCII upper case, and the two non-ASCII letters whose
/// simple case folding reaches an ASCII one.
fn fold(c: char) -> char {
    match c {
        '\u{017F}' => 'S',
        '\u{212A}' => 'K',
        c => c.to_ascii_uppercase(),
    }
}

fn fold_eq(key: &str, name: &str) -> bool {
    key.chars().map(fold).eq(name.chars().map(fold))
}

fn find<'v>(obj: &'v Map<String, Value>, name: &str) -> Option<&'v Value> {
    // Go handles keys in document order and the last key for a field wins.
    obj.iter()
        .filter(|(k, _)| fold_eq(k, name))
        .map(|(_, v)| v)
        .next_back()
}

fn decode_struct(def: &'static StructDef, v: &Value, path: &mut String) -> Result<Go, GoJsonError> {
    let obj = match v {
        Value::Object(obj) => obj,
        Value::Null => return Ok(zero_struct(def)),
        other => return Err(mismatch(path, other, def.name)),
    };
    let mut values = Vec::with_capacity(def.fields.len());
    for field in def.fields {
        let len = path.len();
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(field.name);
        let value = match find(obj, field.name) {
            Some(v) => decode(field.ty, v, path)?,
            None => zero(field.ty),
        };
        path.truncate(len);
        values.push(value);
    }
    Ok(Go::Struct(def, values))
}

fn zero_struct(def: &'static StructDef) -> Go {
    Go::Struct(def, def.fields.iter().map(|f| zero(f.ty)).collect())
}

fn decode(ty: &'static Ty, v: &Value, path: &mut String) -> Result<Go, GoJsonError> {
    Ok(match ty {
        Ty::String => match v {
            Value::String(s) => Go::String(s.clone()),
            Value::Null => zero(ty),
            other => return Err(mismatch(path, other, "string")),
        },
        Ty::Bool => match v {
            Value::Bool(b) => Go::Bool(*b),
            Value::Null => zero(ty),
            other => return Err(mismatch(path, other, "bool")),
        },
        Ty::Int(bits) => match v {
            Value::Number(n) => {
                let go_type = format!("int{bits}");
                let Some(i) = n.as_i64() else {
                    return Err(err(
                        path,
                        format!("cannot unmarshal number {n} into Go value of type {go_type}"),
                    ));
                };
                let fits = *bits >= 64 || {
                    let half = 1i64 << (bits - 1);
                    (-half..half).contains(&i)
                };
                if !fits {
                    return Err(err(
                        path,
                        format!("cannot unmarshal number {n} into Go value of type {go_type}"),
                    ));
                }
                Go::Int(i)
            }
            Value::Null => zero(ty),
            other => return Err(mismatch(path, other, &format!("int{bits}"))),
        },
        Ty::Quantity => Go::Quantity(decode_quantity(v, path)?),
        Ty::IntOrString => match v {
            Value::String(s) => Go::IntOrStringStr(s.clone()),
            Value::Null => Go::IntOrStringInt(0),
            Value::Number(n) => match n.as_i64().and_then(|i| i32::try_from(i).ok()) {
                Some(i) => Go::IntOrStringInt(i),
                None => {
                    return Err(err(
                        path,
                        format!("cannot unmarshal number {n} into Go value of type int32"),
                    ));
                }
            },
            other => return Err(mismatch(path, other, "int32")),
        },
        Ty::Time => match v {
            Value::Null => Go::Time(None),
            Value::String(s) => match time::parse_rfc3339(s) {
                Some(t) if t.is_zero() => Go::Time(None),
                Some(t) => Go::Time(Some(t)),
                None => return Err(err(path, format!("parsing time {s:?} as RFC 3339 failed"))),
            },
            other => return Err(mismatch(path, other, "string")),
        },
        Ty::FieldsV1 => match v {
            Value::Null => Go::FieldsV1(None),
            other => Go::FieldsV1(Some(other.clone())),
        },
        Ty::Struct(def) => decode_struct(def, v, path)?,
        Ty::Ptr(elem) => match v {
            Value::Null => Go::Ptr(elem, None),
            other => Go::Ptr(elem, Some(Box::new(decode(elem, other, path)?))),
        },
        Ty::Slice(elem) => match v {
            Value::Null => Go::Slice(None),
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    out.push(decode(elem, item, path)?);
                    path.truncate(len);
                }
                Go::Slice(Some(out))
            }
            other => return Err(mismatch(path, other, "slice")),
        },
        Ty::Map(elem) => match v {
            Value::Null => Go::Map(None),
            Value::Object(obj) => {
                let mut out = Vec::with_capacity(obj.len());
                for (k, item) in obj {
                    let len = path.len();
                    path.push('.');
                    path.push_str(k);
                    out.push((k.clone(), decode(elem, item, path)?));
                    path.truncate(len);
                }
                out.sort_by(|a, b| a.0.cmp(&b.0));
                Go::Map(Some(out))
            }
            other => return Err(mismatch(path, other, "map")),
        },
    })
}

/// `Quantity.UnmarshalJSON`: `null` is zero; otherwise the raw bytes, without surrounding
/// quotes and with surrounding white space trimmed, must parse.
fn decode_quantity(v: &Value, path: &str) -> Result<String, GoJsonError> {
    let text = match v {
        Value::Null => return Ok("0".to_string()),
        Value::String(s) => {
            if s.chars().any(|c| c < ' ' || c == '"' || c == '\\') {
                return Err(err(
                    path,
                    "quantities must not contain characters that JSON escapes",
                ));
            }
            s.trim_matches(char::is_whitespace).to_string()
        }
        Value::Number(n) => n.to_string(),
        other => return Err(mismatch(path, other, "resource.Quantity")),
    };
    quantity::canonical(&text).map_err(|e| err(path, format!("{text:?}: {e}")))
}

/// `isEmptyValue`, what `omitempty` drops.
fn is_empty(v: &Go) -> bool {
    match v {
        Go::String(s) => s.is_empty(),
        Go::Bool(b) => !b,
        Go::Int(i) => *i == 0,
        Go::Ptr(_, p) => p.is_none(),
        Go::Slice(s) => s.as_ref().is_none_or(Vec::is_empty),
        Go::Map(m) => m.as_ref().is_none_or(Vec::is_empty),
        // Structs, including the ones with their own MarshalJSON, are never empty.
        Go::Quantity(_)
        | Go::IntOrStringInt(_)
        | Go::IntOrStringStr(_)
        | Go::Time(_)
        | Go::FieldsV1(_)
        | Go::Struct(..) => false,
    }
}

/// Whether a type has an `IsZero` method that `omitzero` calls instead of the reflect check.
fn has_is_zero(ty: &Ty) -> bool {
    matches!(ty, Ty::Quantity | Ty::Time)
}

/// What `omitzero` drops: `IsZero()` where the type has it, else `reflect.Value.IsZero`.
fn is_zero(v: &Go) -> bool {
    match v {
        Go::String(s) => s.is_empty(),
        Go::Bool(b) => !b,
        Go::Int(i) => *i == 0,
        Go::Quantity(q) => q == "0",
        Go::IntOrStringInt(i) => *i == 0,
        Go::IntOrStringStr(_) => false,
        Go::Time(t) => t.is_none(),
        Go::FieldsV1(raw) => raw.is_none(),
        Go::Struct(_, fields) => fields.iter().all(is_zero),
        // A pointer to a type with IsZero counts as zero when nil or when it points at zero.
        Go::Ptr(elem, p) => match p {
            None => true,
            Some(inner) => has_is_zero(elem) && is_zero(inner),
        },
        Go::Slice(s) => s.is_none(),
        Go::Map(m) => m.is_none(),
    }
}

fn encode(v: &Go, out: &mut String) {
    match v {
        Go::String(s) | Go::IntOrStringStr(s) => write_string(s, out),
        Go::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Go::Int(i) => out.push_str(&i.to_string()),
        Go::IntOrStringInt(i) => out.push_str(&i.to_string()),
        Go::Quantity(q) => {
            out.push('"');
            out.push_str(q);
            out.push('"');
        }
        Go::Time(None)
        | Go::FieldsV1(None)
        | Go::Ptr(_, None)
        | Go::Slice(None)
        | Go::Map(None) => out.push_str("null"),
        Go::Time(Some(t)) => {
            out.push('"');
            out.push_str(&t.rfc3339_utc());
            out.push('"');
        }
        Go::FieldsV1(Some(raw)) => write_any(raw, out),
        Go::Struct(def, values) => {
            out.push('{');
            let mut first = true;
            for (field, value) in def.fields.iter().zip(values) {
                if (field.omit_empty && is_empty(value)) || (field.omit_zero && is_zero(value)) {
                    continue;
                }
                if !first {
                    out.push(',');
                }
                first = false;
                write_string(field.name, out);
                out.push(':');
                encode(value, out);
            }
            out.push('}');
        }
        Go::Ptr(_, Some(inner)) => encode(inner, out),
        Go::Slice(Some(items)) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                encode(item, out);
            }
            out.push(']');
        }
        Go::Map(Some(entries)) => {
            out.push('{');
            for (i, (k, item)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(k, out);
                out.push(':');
                encode(item, out);
            }
            out.push('}');
        }
    }
}

/// Any JSON value as Go's `json.Marshal` writes it decoded into `interface{}`: compact, object
/// keys sorted (Go sorts map keys), Go's string escaping. Used for raw `FieldsV1`, and for
/// hashing unstructured objects as TWC does.
pub fn write_any(v: &Value, out: &mut String) {
    match v {
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_any(item, out);
            }
            out.push(']');
        }
        Value::Object(obj) => {
            let mut keys: Vec<&String> = obj.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(k, out);
                out.push(':');
                if let Some(item) = obj.get(k) {
                    write_any(item, out);
                }
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// Go's `appendString` with HTML escaping on, as `json.Marshal` uses it.
pub fn write_string(s: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c if c < ' ' || c == '<' || c == '>' || c == '&' => {
                let b = c as u32 as usize;
                out.push_str("\\u00");
                out.push(char::from(HEX[b >> 4]));
                out.push(char::from(HEX[b & 0xf]));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::{pod_template_spec, write_string};
    use serde_json::json;

    #[test]
    fn escaping() {
        let mut out = String::new();
        write_string("<a>&\u{8}\u{c}\u{1}\u{7f}\u{2028}\u{2029}é\"\\", &mut out);
        assert_eq!(
            out,
            r#""\u003ca\u003e\u0026\b\f\u0001\u{7f}\u2028\u2029é\"\\""#
                .replace("\\u{7f}", "\u{7f}")
        );
    }

    #[test]
    fn zero_values_and_errors() {
        let got = pod_template_spec(&json!({"spec": {"containers": [{"name": "w"}]}}));
        let want = r#"{"metadata":{},"spec":{"containers":[{"name":"w","resources":{}}]}}"#;
        assert_eq!(got.as_deref(), Ok(want));
        let bad = json!({"spec": {"containers": [{"resources": {"limits": {"cpu": "1x"}}}]}});
        let e = pod_template_spec(&bad).err().map(|e| e.path);
        assert_eq!(
            e.as_deref(),
            Some("spec.containers[0].resources.limits.cpu")
        );
        assert!(pod_template_spec(&json!({"spec": {"hostNetwork": "true"}})).is_err());
        assert!(pod_template_spec(&json!({"spec": {"priority": 1.5}})).is_err());
        assert!(pod_template_spec(&json!({"spec": {"priority": 4_294_967_296u64}})).is_err());
    }
}
