//! The shape of the generated field table (`fields.rs`): what Go's `encoding/json` knows about
//! each struct reachable from `PodTemplateSpec`.

/// A Go type as `encoding/json` treats it. Only the kinds reachable from `PodTemplateSpec`
/// exist here; `hack/gofields` refuses to generate a table with any other (floats, unsigned
/// integers, `[]byte`, interfaces, other custom marshalers).
#[derive(Debug)]
pub enum Ty {
    /// A string kind (`string`, and named strings such as `corev1.Protocol`).
    String,
    /// `bool`.
    Bool,
    /// A signed integer of the given width in bits.
    Int(u8),
    /// `resource.Quantity` (its own MarshalJSON: a string in canonical form; IsZero: value 0).
    Quantity,
    /// `intstr.IntOrString` (its own MarshalJSON: a number or a string, as decoded; no IsZero).
    IntOrString,
    /// `metav1.Time` (RFC 3339 in UTC, whole seconds; `null` when zero; IsZero).
    Time,
    /// `metav1.FieldsV1` (raw JSON kept as given).
    FieldsV1,
    /// A struct.
    Struct(&'static StructDef),
    /// A pointer: `nil` is `null`.
    Ptr(&'static Ty),
    /// A slice: `nil` is `null`, empty is `[]`.
    Slice(&'static Ty),
    /// A map with string keys: `nil` is `null`, empty is `{}`; Go writes keys sorted.
    Map(&'static Ty),
}

/// A Go struct: its JSON fields in the order Go writes them.
#[derive(Debug)]
pub struct StructDef {
    /// The Go type name.
    pub name: &'static str,
    /// Fields, embedded structs already flattened, `json:"-"` already dropped.
    pub fields: &'static [Field],
}

/// One JSON field of a struct.
#[derive(Debug)]
pub struct Field {
    /// The JSON name (the tag name, or the Go field name when the tag has none).
    pub name: &'static str,
    /// The field's type.
    pub ty: &'static Ty,
    /// `omitempty`: dropped when "", 0, false, a nil pointer, or an empty slice or map.
    pub omit_empty: bool,
    /// `omitzero`: dropped when the value is its zero value (or its `IsZero()` says so).
    pub omit_zero: bool,
}

/// No omit option.
pub const NONE: u8 = 0;
/// `omitempty`.
pub const EMPTY: u8 = 1;
/// `omitzero`.
pub const ZERO: u8 = 2;
/// `omitempty,omitzero`.
pub const EMPTY_ZERO: u8 = 3;

impl Field {
    /// A field; `omit` is one of [`NONE`], [`EMPTY`], [`ZERO`], [`EMPTY_ZERO`].
    pub const fn new(name: &'static str, ty: &'static Ty, omit: u8) -> Self {
        Field {
            name,
            ty,
            omit_empty: omit & EMPTY != 0,
            omit_zero: omit & ZERO != 0,
        }
    }
}
