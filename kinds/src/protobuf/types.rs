//! The vocabulary of the generated schema table (`schema.rs`): field types, cardinality and how
//! Go's `encoding/json` writes a field of the decoded object.

/// What a field holds on the wire and how it reads as JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Type {
    /// `string` (wire type 2) → JSON string.
    String,
    /// `bool` (varint) → JSON boolean.
    Bool,
    /// `int32` (varint, truncated to 32 bits) → JSON number.
    Int32,
    /// `int64` (varint) → JSON number.
    Int64,
    /// `double` (fixed64) → JSON number.
    #[allow(
        dead_code,
        reason = "no kind in the current table has one; kept for regeneration"
    )]
    Double,
    /// `bytes` (wire type 2) → JSON base64 string, as Go's `[]byte`.
    Bytes,
    /// An embedded message: index into `schema::MESSAGES` → JSON object.
    Message(u16),
    /// `resource.Quantity` {string = 1} → JSON string.
    Quantity,
    /// `intstr.IntOrString` {type = 1, intVal = 2, strVal = 3} → JSON number or string.
    IntOrString,
    /// `meta/v1.Time` {seconds = 1, nanos = 2} → RFC 3339 in seconds, `null` when zero.
    Time,
    /// `meta/v1.MicroTime` → RFC 3339 with 6 fractional digits, `null` when zero.
    MicroTime,
    /// `meta/v1.Duration` {duration = 1 (ns)} → Go duration string (`1h0m0s`).
    #[allow(
        dead_code,
        reason = "no kind in the current table has one; kept for regeneration"
    )]
    Duration,
    /// `runtime.RawExtension` / `meta/v1.FieldsV1` {raw = 1} → the embedded JSON, `null` when empty.
    RawJson,
    /// A Go named `[]string` (`ExtraValue`, `Verbs`) {repeated items = 1} → JSON array.
    StringList,
}

impl Type {
    /// Whether the value is a length-delimited message whose repeated occurrences merge.
    pub(crate) fn is_message(self) -> bool {
        !matches!(
            self,
            Type::String | Type::Bool | Type::Int32 | Type::Int64 | Type::Double | Type::Bytes
        )
    }
}

/// How many values a field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Card {
    /// One value (proto2 `optional`); the last occurrence wins, messages merge.
    One,
    /// `repeated`: a JSON array.
    Repeated,
    /// `map<string, Type>` (entries: key = 1, value = 2): a JSON object.
    Map,
}

/// When Go's `encoding/json` writes the field of an object decoded from protobuf.
///
/// Kubernetes' Go marshallers write every non-pointer field, even when it is zero (`name: ""`,
/// `generation: 0`), and pointer fields only when set, so the wire alone cannot tell whether a
/// zero is to be dropped: the JSON tag and the Go type decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Presence {
    /// A Go pointer: written when present on the wire, even if zero (`replicas: 0`).
    Present,
    /// A Go value with `omitempty`: written when present and not zero.
    NonZero,
    /// A Go value without `omitempty`, or a struct (which `omitempty` never drops): always
    /// written, as its zero value when absent (`creationTimestamp: null`, `status: {}`).
    Always,
    /// A slice or map: written when it has elements (Go would write `null` for an absent slice
    /// without `omitempty`; dropping it reads the same to every Kubernetes JSON decoder).
    NonEmpty,
    /// A Go struct embedded with `json:",inline"`: its fields are written into the parent object.
    Inline,
}

/// One field of a message.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Field {
    /// The protobuf field number.
    pub(crate) tag: u32,
    /// The JSON member name (empty for [`Presence::Inline`]).
    pub(crate) json: &'static str,
    /// The element type.
    pub(crate) ty: Type,
    /// One, repeated or map.
    pub(crate) card: Card,
    /// When the JSON encoding writes it.
    pub(crate) presence: Presence,
}

/// A message type: its fields sorted by tag.
#[derive(Debug)]
pub(crate) struct Message {
    /// The protobuf full name, for error messages.
    pub(crate) name: &'static str,
    /// The fields, sorted by `tag`.
    pub(crate) fields: &'static [Field],
}

impl Message {
    /// The field with protobuf number `tag`, if the schema knows it.
    pub(crate) fn field(&self, tag: u32) -> Option<(usize, &'static Field)> {
        let i = self.fields.binary_search_by_key(&tag, |f| f.tag).ok()?;
        Some((i, &self.fields[i]))
    }
}

/// Shorthand for the generated table.
pub(crate) const fn f(
    tag: u32,
    json: &'static str,
    ty: Type,
    card: Card,
    presence: Presence,
) -> Field {
    Field {
        tag,
        json,
        ty,
        card,
        presence,
    }
}
