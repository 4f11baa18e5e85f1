//! Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`) decoded into the JSON
//! object Kubernetes' JSON encoding of the same Go object would be.
//!
//! kubectl v1.32+ sends the bodies of its typed-client commands (`create namespace`, `create
//! secret`, `create deployment`, `create token`...) as protobuf; `run`, `expose`, `drain`'s
//! Eviction, `delete` and patches send JSON. The server stores JSON, so [`decode`] turns such a
//! body into that JSON:
//!
//! ```text
//! "k8s\0" ++ runtime.Unknown { typeMeta: {apiVersion = 1, kind = 2} = 1, raw = 2,
//!                              contentEncoding = 3, contentType = 4 }
//!            raw = the message of (apiVersion, kind), e.g. core/v1 Namespace
//! ```
//!
//! ## Layout
//! - `schema.rs`: the generated table (message → fields: tag, JSON name, type, presence; kinds).
//!   Regenerate with `tools/gen-protobuf-schema.py` (see its header).
//! - `types.rs`: the table's vocabulary; `types::Presence` explains how Go's JSON
//!   encoding drops or keeps zero values.
//! - `wire.rs`: the bounds-checked wire reader. `special.rs`: Go's text of times and durations.
//!
//! In the server: when a request's `Content-Type` [is Kubernetes protobuf](is_content_type),
//! `decode` the body and carry on with the JSON; an [`Error`] is a 400 BadRequest. Responses stay
//! JSON (kubectl's `Accept` lists `application/json` too).
//!
//! Differences from Go's JSON encoding, all harmless to a JSON decoder: a slice or map absent from
//! the wire is left out where Go would write `null` (see `Presence::NonEmpty`), and a
//! `resource.Quantity` keeps the string on the wire as it is (Go's marshaller writes the canonical
//! form, so Go clients' quantities are already what Go's JSON encoding writes).

mod schema;

/// The inputs the protobuf table was generated from.
pub use schema::SOURCES;
mod special;
mod types;
mod wire;

use base64::Engine as _;
use serde_json::{Map, Number, Value};

use types::{Card, Field, Presence, Type};
use wire::Reader;

/// The 4-byte prefix of every Kubernetes protobuf body.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// The media type of Kubernetes protobuf bodies.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// How deep messages may nest (each level costs stack; Kubernetes objects need about 15).
const MAX_DEPTH: usize = 100;

/// Why a body could not be decoded; every variant is the client's fault (HTTP 400 BadRequest).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The body does not start with `k8s\0`.
    #[error("not a Kubernetes protobuf body: it does not start with the magic prefix \"k8s\\0\"")]
    BadMagic,
    /// A length or varint runs past the end of the data.
    #[error("truncated protobuf data in {message}")]
    Truncated {
        /// The message being read.
        message: &'static str,
    },
    /// A varint longer than 64 bits.
    #[error("varint overflows 64 bits in {message}")]
    VarintOverflow {
        /// The message being read.
        message: &'static str,
    },
    /// Field number 0 or beyond the protobuf range.
    #[error("invalid protobuf field number {number} in {message}")]
    InvalidFieldNumber {
        /// The message being read.
        message: &'static str,
        /// The field number read.
        number: u64,
    },
    /// Wire types 3 and 4 (groups), 6 and 7 do not occur in Kubernetes messages.
    #[error("unsupported protobuf wire type {wire_type} for field {tag} of {message}")]
    UnsupportedWireType {
        /// The message being read.
        message: &'static str,
        /// The field number.
        tag: u32,
        /// The wire type read.
        wire_type: u8,
    },
    /// A known field with a wire type that does not fit its schema type.
    #[error(
        "field {tag} ({field}) of {message} has wire type {found}, expected {expected} for its type"
    )]
    WireTypeMismatch {
        /// The message being read.
        message: &'static str,
        /// The field number.
        tag: u32,
        /// The JSON name of the field.
        field: &'static str,
        /// The wire type read.
        found: u8,
        /// The wire type the schema expects.
        expected: u8,
    },
    /// The envelope names a kind this decoder has no schema for.
    #[error("no protobuf schema for kind {kind:?} of apiVersion {api_version:?}")]
    UnknownKind {
        /// `typeMeta.apiVersion` of the envelope.
        api_version: String,
        /// `typeMeta.kind` of the envelope.
        kind: String,
    },
    /// `runtime.Unknown.contentEncoding` is set (Kubernetes never compresses inside the envelope).
    #[error("unsupported protobuf content encoding {0:?}")]
    UnsupportedEncoding(String),
    /// A `RawExtension` or `FieldsV1` whose bytes are neither JSON nor a protobuf object.
    #[error("field {field} of {message} holds invalid embedded JSON")]
    InvalidEmbeddedJson {
        /// The message being read.
        message: &'static str,
        /// The JSON name of the field.
        field: &'static str,
        /// What the JSON parser said.
        #[source]
        source: serde_json::Error,
    },
    /// A double that JSON cannot represent (NaN or infinite); Go's encoder refuses it too.
    #[error("field {field} of {message} is {value}, which JSON cannot represent")]
    UnrepresentableNumber {
        /// The message being read.
        message: &'static str,
        /// The JSON name of the field.
        field: &'static str,
        /// The value read.
        value: f64,
    },
    /// A `Time` or `MicroTime` outside the years 0000-9999, which RFC 3339 cannot write.
    #[error("field {field} of {message} is a time outside the years 0000-9999 ({seconds}s)")]
    TimeOutOfRange {
        /// The message being read.
        message: &'static str,
        /// The JSON name of the field.
        field: &'static str,
        /// Seconds since the Unix epoch.
        seconds: i64,
    },
    /// Messages nested deeper than any Kubernetes object does.
    #[error("protobuf messages nested deeper than {MAX_DEPTH} levels")]
    TooDeep,
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Whether a `Content-Type` header value names Kubernetes protobuf (parameters and case ignored).
pub fn is_content_type(content_type: &str) -> bool {
    let media_type = content_type.split(';').next().unwrap_or_default().trim();
    media_type.eq_ignore_ascii_case(CONTENT_TYPE)
}

/// Whether `body` starts with the Kubernetes protobuf magic prefix.
pub fn is_protobuf(body: &[u8]) -> bool {
    body.starts_with(MAGIC)
}

/// Decodes a Kubernetes protobuf body (`k8s\0` + `runtime.Unknown`) into the JSON object Go's JSON
/// encoding of the same object gives, with `apiVersion` and `kind` set from the envelope.
pub fn decode(body: &[u8]) -> Result<Value> {
    decode_at(body, 0)
}

fn decode_at(body: &[u8], depth: usize) -> Result<Value> {
    let data = body.strip_prefix(MAGIC).ok_or(Error::BadMagic)?;
    let envelope = Envelope::read(data)?;
    if !envelope.content_encoding.is_empty() {
        return Err(Error::UnsupportedEncoding(envelope.content_encoding));
    }
    let index = schema::KINDS
        .binary_search_by(|&(gv, k, _)| {
            (gv, k).cmp(&(envelope.api_version.as_str(), envelope.kind.as_str()))
        })
        .map(|i| schema::KINDS[i].2)
        .map_err(|_| Error::UnknownKind {
            api_version: envelope.api_version.clone(),
            kind: envelope.kind.clone(),
        })?;
    let mut object = message(index, envelope.raw, depth + 1)?;
    object.insert("apiVersion".to_owned(), Value::String(envelope.api_version));
    object.insert("kind".to_owned(), Value::String(envelope.kind));
    Ok(Value::Object(object))
}

/// The fields of `runtime.Unknown` that matter here.
struct Envelope<'a> {
    api_version: String,
    kind: String,
    raw: &'a [u8],
    content_encoding: String,
}

impl<'a> Envelope<'a> {
    const NAME: &'static str = "k8s.io.apimachinery.pkg.runtime.Unknown";
    const TYPE_META: &'static str = "k8s.io.apimachinery.pkg.runtime.TypeMeta";

    fn read(data: &'a [u8]) -> Result<Self> {
        let mut envelope = Envelope {
            api_version: String::new(),
            kind: String::new(),
            raw: &[],
            content_encoding: String::new(),
        };
        let mut reader = Reader::new(data, Self::NAME);
        while let Some((tag, value)) = reader.field()? {
            match tag {
                1 => {
                    let mut meta =
                        Reader::new(bytes(Self::NAME, tag, "typeMeta", value)?, Self::TYPE_META);
                    while let Some((tag, value)) = meta.field()? {
                        match tag {
                            1 => {
                                envelope.api_version =
                                    text(Self::TYPE_META, tag, "apiVersion", value)?
                            }
                            2 => envelope.kind = text(Self::TYPE_META, tag, "kind", value)?,
                            _ => {}
                        }
                    }
                }
                2 => envelope.raw = bytes(Self::NAME, tag, "raw", value)?,
                3 => envelope.content_encoding = text(Self::NAME, tag, "contentEncoding", value)?,
                _ => {}
            }
        }
        Ok(envelope)
    }
}

/// The payload of a length-delimited field.
fn bytes<'a>(
    message: &'static str,
    tag: u32,
    field: &'static str,
    value: wire::Value<'a>,
) -> Result<&'a [u8]> {
    match value {
        wire::Value::Bytes(b) => Ok(b),
        other => Err(Error::WireTypeMismatch {
            message,
            tag,
            field,
            found: other.wire_type(),
            expected: 2,
        }),
    }
}

/// A string field; invalid UTF-8 becomes U+FFFD, as Go's JSON encoder writes it.
fn text(
    message: &'static str,
    tag: u32,
    field: &'static str,
    value: wire::Value,
) -> Result<String> {
    Ok(String::from_utf8_lossy(bytes(message, tag, field, value)?).into_owned())
}

/// What the wire held for one field of a message being decoded.
enum Slot<'a> {
    Absent,
    /// A scalar: the last occurrence wins.
    Scalar(wire::Value<'a>),
    /// A message: occurrences merge, which is decoding their concatenation.
    Chunks(Vec<&'a [u8]>),
    /// Repeated elements.
    List(Vec<Value>),
    /// Map entries.
    Entries(Map<String, Value>),
}

/// Decodes message `index` of the schema into a JSON object.
fn message(index: u16, data: &[u8], depth: usize) -> Result<Map<String, Value>> {
    if depth > MAX_DEPTH {
        return Err(Error::TooDeep);
    }
    let msg = &schema::MESSAGES[usize::from(index)];
    let mut slots: Vec<Slot> = msg.fields.iter().map(|_| Slot::Absent).collect();
    let mut reader = Reader::new(data, msg.name);
    while let Some((tag, value)) = reader.field()? {
        // Unknown fields are skipped, as Go's unmarshallers do.
        let Some((i, field)) = msg.field(tag) else {
            continue;
        };
        let ctx = Ctx {
            message: msg.name,
            field,
            depth,
        };
        match field.card {
            Card::One if field.ty.is_message() => {
                let chunk = ctx.expect_bytes(value)?;
                match &mut slots[i] {
                    Slot::Chunks(chunks) => chunks.push(chunk),
                    slot => *slot = Slot::Chunks(vec![chunk]),
                }
            }
            Card::One => {
                ctx.check_scalar(value)?;
                slots[i] = Slot::Scalar(value);
            }
            Card::Repeated => {
                let list = match &mut slots[i] {
                    Slot::List(list) => list,
                    slot => {
                        *slot = Slot::List(Vec::new());
                        let Slot::List(list) = slot else {
                            unreachable!()
                        };
                        list
                    }
                };
                ctx.repeated(value, list)?;
            }
            Card::Map => {
                let entries = match &mut slots[i] {
                    Slot::Entries(entries) => entries,
                    slot => {
                        *slot = Slot::Entries(Map::new());
                        let Slot::Entries(entries) = slot else {
                            unreachable!()
                        };
                        entries
                    }
                };
                let (key, value) = ctx.map_entry(value)?;
                entries.insert(key, value);
            }
        }
    }

    let mut object = Map::new();
    for (field, slot) in msg.fields.iter().zip(slots) {
        let ctx = Ctx {
            message: msg.name,
            field,
            depth,
        };
        let value = match (slot, field.presence) {
            (Slot::List(list), _) if !list.is_empty() => Some(Value::Array(list)),
            (Slot::Entries(entries), _) if !entries.is_empty() => Some(Value::Object(entries)),
            (Slot::List(_) | Slot::Entries(_), _) => None,
            (slot, Presence::Inline) => {
                let chunks = match slot {
                    Slot::Chunks(chunks) => chunks,
                    _ => Vec::new(),
                };
                let Type::Message(child) = field.ty else {
                    unreachable!(
                        "schema: inline field {} of {} is not a message",
                        field.tag, msg.name
                    )
                };
                object.extend(message(child, &concat(&chunks), depth + 1)?);
                None
            }
            (Slot::Absent, Presence::Always) => Some(ctx.zero()?),
            (Slot::Absent, _) => None,
            (Slot::Scalar(v), presence) => {
                let value = ctx.scalar(v)?;
                (presence != Presence::NonZero || !is_zero(&value)).then_some(value)
            }
            (Slot::Chunks(chunks), _) => Some(ctx.embedded(&concat(&chunks))?),
        };
        if let Some(value) = value {
            object.insert(field.json.to_owned(), value);
        }
    }
    Ok(object)
}

fn concat(chunks: &[&[u8]]) -> Vec<u8> {
    chunks.concat()
}

/// Whether Go's `omitempty` drops the scalar.
fn is_zero(value: &Value) -> bool {
    match value {
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Null => true,
        Value::Array(_) | Value::Object(_) => false,
    }
}

/// The field being decoded, for conversions and error messages.
struct Ctx<'f> {
    message: &'static str,
    field: &'f Field,
    depth: usize,
}

impl Ctx<'_> {
    fn mismatch(&self, found: u8, expected: u8) -> Error {
        Error::WireTypeMismatch {
            message: self.message,
            tag: self.field.tag,
            field: self.field.json,
            found,
            expected,
        }
    }

    fn out_of_range(&self, seconds: i64) -> Error {
        Error::TimeOutOfRange {
            message: self.message,
            field: self.field.json,
            seconds,
        }
    }

    fn expected_wire_type(&self) -> u8 {
        match self.field.ty {
            Type::Bool | Type::Int32 | Type::Int64 => 0,
            Type::Double => 1,
            _ => 2,
        }
    }

    fn expect_bytes<'a>(&self, value: wire::Value<'a>) -> Result<&'a [u8]> {
        match value {
            wire::Value::Bytes(b) => Ok(b),
            other => Err(self.mismatch(other.wire_type(), 2)),
        }
    }

    fn check_scalar(&self, value: wire::Value) -> Result<()> {
        let expected = self.expected_wire_type();
        if value.wire_type() == expected {
            Ok(())
        } else {
            Err(self.mismatch(value.wire_type(), expected))
        }
    }

    /// One occurrence of a repeated field: an element, or packed numbers.
    fn repeated(&self, value: wire::Value, list: &mut Vec<Value>) -> Result<()> {
        let expected = self.expected_wire_type();
        match value {
            wire::Value::Bytes(packed) if expected != 2 => {
                let mut reader = Reader::new(packed, self.message);
                while !reader.is_empty() {
                    let element = if expected == 0 {
                        wire::Value::Varint(reader.varint()?)
                    } else {
                        wire::Value::Fixed64(reader.fixed64()?)
                    };
                    list.push(self.scalar(element)?);
                }
                Ok(())
            }
            value if self.field.ty.is_message() => {
                let b = self.expect_bytes(value)?;
                list.push(self.embedded(b)?);
                Ok(())
            }
            value => {
                self.check_scalar(value)?;
                list.push(self.scalar(value)?);
                Ok(())
            }
        }
    }

    /// A map entry message {key = 1, value = 2}; absent parts are zero, as in Go.
    fn map_entry(&self, value: wire::Value) -> Result<(String, Value)> {
        let entry = self.expect_bytes(value)?;
        let mut reader = Reader::new(entry, self.message);
        let mut key = String::new();
        let mut scalar = None;
        let mut chunks = Vec::new();
        while let Some((tag, value)) = reader.field()? {
            match tag {
                1 => key = text(self.message, self.field.tag, self.field.json, value)?,
                2 if self.field.ty.is_message() => chunks.push(self.expect_bytes(value)?),
                2 => {
                    self.check_scalar(value)?;
                    scalar = Some(value);
                }
                _ => {}
            }
        }
        let value = if self.field.ty.is_message() {
            self.embedded(&concat(&chunks))?
        } else if let Some(v) = scalar {
            self.scalar(v)?
        } else {
            self.zero()?
        };
        Ok((key, value))
    }

    /// A scalar whose wire type was checked.
    fn scalar(&self, value: wire::Value) -> Result<Value> {
        Ok(match (self.field.ty, value) {
            (Type::Bool, wire::Value::Varint(v)) => Value::Bool(v != 0),
            (Type::Int32, wire::Value::Varint(v)) => Value::from(v as i32),
            (Type::Int64, wire::Value::Varint(v)) => Value::from(v as i64),
            (Type::Double, wire::Value::Fixed64(bits)) => self.double(f64::from_bits(bits))?,
            (Type::String, wire::Value::Bytes(b)) => {
                Value::String(String::from_utf8_lossy(b).into_owned())
            }
            (Type::Bytes, wire::Value::Bytes(b)) => {
                Value::String(base64::engine::general_purpose::STANDARD.encode(b))
            }
            (_, other) => return Err(self.mismatch(other.wire_type(), self.expected_wire_type())),
        })
    }

    /// A double as Go writes it: integral values without a fraction.
    fn double(&self, value: f64) -> Result<Value> {
        if !value.is_finite() {
            return Err(Error::UnrepresentableNumber {
                message: self.message,
                field: self.field.json,
                value,
            });
        }
        if value.fract() == 0.0 && value.abs() < 1e15 {
            return Ok(Value::from(value as i64));
        }
        Ok(Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    /// The JSON of Go's zero value of the field's type.
    fn zero(&self) -> Result<Value> {
        Ok(match self.field.ty {
            Type::String | Type::Bytes => Value::String(String::new()),
            Type::Bool => Value::Bool(false),
            Type::Int32 | Type::Int64 | Type::Double | Type::IntOrString => Value::from(0),
            Type::Quantity => Value::String("0".to_owned()),
            Type::Duration => Value::String("0s".to_owned()),
            Type::Time | Type::MicroTime | Type::RawJson | Type::StringList => Value::Null,
            Type::Message(child) => Value::Object(message(child, &[], self.depth + 1)?),
        })
    }

    /// An embedded message (all merged occurrences) as JSON.
    fn embedded(&self, data: &[u8]) -> Result<Value> {
        let name = self.message;
        let mut reader = Reader::new(data, name);
        match self.field.ty {
            Type::Message(child) => Ok(Value::Object(message(child, data, self.depth + 1)?)),
            Type::Quantity => {
                let mut quantity = String::new();
                while let Some((tag, value)) = reader.field()? {
                    if tag == 1 {
                        quantity = text(name, tag, "string", value)?;
                    }
                }
                if quantity.is_empty() {
                    quantity.push('0');
                }
                Ok(Value::String(quantity))
            }
            Type::IntOrString => {
                let (mut kind, mut int, mut string) = (0u64, 0i32, String::new());
                while let Some((tag, value)) = reader.field()? {
                    match (tag, value) {
                        (1, wire::Value::Varint(v)) => kind = v,
                        (2, wire::Value::Varint(v)) => int = v as i32,
                        (3, value) => string = text(name, tag, "strVal", value)?,
                        (1 | 2, other) => return Err(self.mismatch(other.wire_type(), 0)),
                        _ => {}
                    }
                }
                Ok(if kind == 1 {
                    Value::String(string)
                } else {
                    Value::from(int)
                })
            }
            Type::Time | Type::MicroTime => {
                if data.is_empty() {
                    return Ok(Value::Null);
                }
                let (mut seconds, mut nanos) = (0i64, 0i32);
                while let Some((tag, value)) = reader.field()? {
                    match (tag, value) {
                        (1, wire::Value::Varint(v)) => seconds = v as i64,
                        (2, wire::Value::Varint(v)) => nanos = v as i32,
                        (1 | 2, other) => return Err(self.mismatch(other.wire_type(), 0)),
                        _ => {}
                    }
                }
                if self.field.ty == Type::Time {
                    // Go keeps whole seconds only (meta/v1 time_proto.go).
                    if seconds == special::GO_ZERO_TIME_UNIX {
                        return Ok(Value::Null);
                    }
                    return special::rfc3339(seconds)
                        .map(Value::String)
                        .ok_or_else(|| self.out_of_range(seconds));
                }
                // Nanoseconds truncated to microseconds (toward zero), then normalised.
                let nanos = i128::from(nanos) - i128::from(nanos) % 1_000;
                let total = i128::from(seconds) * 1_000_000_000 + nanos;
                let (secs, sub) = (
                    total.div_euclid(1_000_000_000),
                    total.rem_euclid(1_000_000_000),
                );
                let Ok(secs) = i64::try_from(secs) else {
                    return Err(self.out_of_range(seconds));
                };
                if secs == special::GO_ZERO_TIME_UNIX && sub == 0 {
                    return Ok(Value::Null);
                }
                special::rfc3339_micro(secs, (sub / 1_000) as u32)
                    .map(Value::String)
                    .ok_or_else(|| self.out_of_range(secs))
            }
            Type::Duration => {
                let mut nanos = 0i64;
                while let Some((tag, value)) = reader.field()? {
                    match (tag, value) {
                        (1, wire::Value::Varint(v)) => nanos = v as i64,
                        (1, other) => return Err(self.mismatch(other.wire_type(), 0)),
                        _ => {}
                    }
                }
                Ok(Value::String(special::go_duration(nanos)))
            }
            Type::RawJson => {
                let mut raw: &[u8] = &[];
                while let Some((tag, value)) = reader.field()? {
                    if tag == 1 {
                        raw = bytes(name, tag, "raw", value)?;
                    }
                }
                if raw.is_empty() {
                    Ok(Value::Null)
                } else if is_protobuf(raw) {
                    decode_at(raw, self.depth + 1)
                } else {
                    serde_json::from_slice(raw).map_err(|source| Error::InvalidEmbeddedJson {
                        message: name,
                        field: self.field.json,
                        source,
                    })
                }
            }
            Type::StringList => {
                let mut items = Vec::new();
                while let Some((tag, value)) = reader.field()? {
                    if tag == 1 {
                        items.push(Value::String(text(name, tag, "items", value)?));
                    }
                }
                Ok(if items.is_empty() {
                    Value::Null
                } else {
                    Value::Array(items)
                })
            }
            Type::String | Type::Bool | Type::Int32 | Type::Int64 | Type::Double | Type::Bytes => {
                unreachable!("schema: scalar {:?} decoded as a message", self.field.ty)
            }
        }
    }
}

#[cfg(test)]
mod tests;
