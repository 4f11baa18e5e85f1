//! The protobuf form of a Swagger 2.0 document that kubectl asks `/openapi/v2` for
//! (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`): gnostic's `openapi.v2.Document`
//! (github.com/google/gnostic-models, `openapiv2/OpenAPIv2.proto`).
//!
//! [`encode`] writes the messages of the parts of Swagger 2.0 that skiff's document uses, from the
//! same JSON that `/openapi/v2` serves as JSON: no crate provides gnostic's types, and a protobuf
//! writer for these few messages is smaller than a code generator. A JSON member the encoder
//! has no field for is left out, as gnostic's own compiler leaves out what it does not know.
//!
//! Values that gnostic keeps as YAML (vendor extensions, `default`, `enum`, `example`) are written
//! as `Any { yaml }` holding the value's JSON text, which is YAML's flow syntax: clients
//! (kube-openapi's `VendorExtensionToMap`, kubectl's `hasGVKExtension`) read them with a YAML
//! parser.
//!
//! proto3 leaves fields at their default out of the wire, and so does the writer, except inside a
//! `oneof` (whose presence is the choice) and for messages, which are written whenever the JSON
//! has the member: an empty `properties` says "an object with no fields", not "a map".

use serde_json::{Map, Value};

/// A protobuf message being written.
#[derive(Default)]
struct Writer {
    buf: Vec<u8>,
}

const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;

impl Writer {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    fn key(&mut self, tag: u32, wire_type: u32) {
        self.varint(u64::from(tag << 3 | wire_type));
    }

    fn bytes(&mut self, tag: u32, data: &[u8]) {
        self.key(tag, LEN);
        self.varint(data.len() as u64);
        self.buf.extend_from_slice(data);
    }

    /// A string field; the empty string is the default and is left out.
    fn string(&mut self, tag: u32, s: &str) {
        if !s.is_empty() {
            self.bytes(tag, s.as_bytes());
        }
    }

    /// A string field that is written even when empty (a `repeated string` element).
    fn string_always(&mut self, tag: u32, s: &str) {
        self.bytes(tag, s.as_bytes());
    }

    fn boolean(&mut self, tag: u32, b: bool) {
        if b {
            self.key(tag, VARINT);
            self.varint(1);
        }
    }

    fn int64(&mut self, tag: u32, v: i64) {
        if v != 0 {
            self.key(tag, VARINT);
            self.varint(v as u64);
        }
    }

    fn double(&mut self, tag: u32, v: f64) {
        if v != 0.0 {
            self.key(tag, FIXED64);
            self.buf.extend_from_slice(&v.to_le_bytes());
        }
    }

    /// An embedded message, written even when it is empty.
    fn message(&mut self, tag: u32, fill: impl FnOnce(&mut Writer)) {
        let mut inner = Writer::default();
        fill(&mut inner);
        self.bytes(tag, &inner.buf);
    }
}

fn str_of<'a>(object: &'a Map<String, Value>, key: &str) -> &'a str {
    object.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn bool_of(object: &Map<String, Value>, key: &str) -> bool {
    object.get(key).and_then(Value::as_bool).unwrap_or_default()
}

fn strings(w: &mut Writer, tag: u32, value: Option<&Value>) {
    for s in value.and_then(Value::as_array).into_iter().flatten() {
        if let Some(s) = s.as_str() {
            w.string_always(tag, s);
        }
    }
}

/// `Any { yaml = 2 }`: the value's JSON text, which a YAML parser reads as the same value.
fn any(w: &mut Writer, tag: u32, value: &Value) {
    w.message(tag, |a| a.string_always(2, &value.to_string()));
}

/// `repeated NamedAny vendor_extension`: the `x-` members of `object`, in key order.
fn vendor_extensions(w: &mut Writer, tag: u32, object: &Map<String, Value>) {
    for (name, value) in object.iter().filter(|(k, _)| k.starts_with("x-")) {
        w.message(tag, |named| {
            named.string(1, name);
            any(named, 2, value);
        });
    }
}

/// Encodes a Swagger 2.0 document (`swagger: "2.0"`, as `/openapi/v2` serves it as JSON) as
/// gnostic's `openapi.v2.Document`.
pub fn encode(document: &Value) -> Vec<u8> {
    let empty = Map::new();
    let doc = document.as_object().unwrap_or(&empty);
    let mut w = Writer::default();
    w.string(1, str_of(doc, "swagger"));
    if let Some(info) = doc.get("info").and_then(Value::as_object) {
        w.message(2, |i| {
            i.string(1, str_of(info, "title"));
            i.string(2, str_of(info, "version"));
            i.string(3, str_of(info, "description"));
            vendor_extensions(i, 7, info);
        });
    }
    w.string(3, str_of(doc, "host"));
    w.string(4, str_of(doc, "basePath"));
    strings(&mut w, 5, doc.get("schemes"));
    strings(&mut w, 6, doc.get("consumes"));
    strings(&mut w, 7, doc.get("produces"));
    if let Some(paths) = doc.get("paths").and_then(Value::as_object) {
        w.message(8, |p| {
            vendor_extensions(p, 1, paths);
            for (path, item) in paths.iter().filter(|(k, _)| k.starts_with('/')) {
                p.message(2, |named| {
                    named.string(1, path);
                    named.message(2, |pi| path_item(pi, item));
                });
            }
        });
    }
    if let Some(definitions) = doc.get("definitions").and_then(Value::as_object) {
        w.message(9, |d| named_schemas(d, 1, definitions));
    }
    // `ParameterDefinitions { repeated NamedParameter additional_properties = 1 }`: the shared
    // parameters that aggregated servers' documents refer to.
    if let Some(shared) = doc.get("parameters").and_then(Value::as_object) {
        w.message(10, |d| {
            for (name, p) in shared {
                let Some(p) = p.as_object() else { continue };
                d.message(1, |named| {
                    named.string(1, name);
                    named.message(2, |value| parameter(value, p));
                });
            }
        });
    }
    for requirement in doc
        .get("security")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        w.message(12, |r| security_requirement(r, requirement));
    }
    if let Some(definitions) = doc.get("securityDefinitions").and_then(Value::as_object) {
        w.message(13, |d| {
            for (name, scheme) in definitions {
                d.message(1, |named| {
                    named.string(1, name);
                    named.message(2, |item| security_scheme(item, scheme));
                });
            }
        });
    }
    vendor_extensions(&mut w, 16, doc);
    w.buf
}

/// `SecurityRequirement { repeated NamedStringArray additional_properties = 1 }`.
fn security_requirement(w: &mut Writer, requirement: &Value) {
    for (name, scopes) in requirement.as_object().into_iter().flatten() {
        w.message(1, |named| {
            named.string(1, name);
            named.message(2, |array| strings(array, 1, Some(scopes)));
        });
    }
}

/// `SecurityDefinitionsItem`: the `oneof` by `type` (only API keys and basic auth occur).
fn security_scheme(w: &mut Writer, scheme: &Value) {
    let empty = Map::new();
    let s = scheme.as_object().unwrap_or(&empty);
    match str_of(s, "type") {
        "basic" => w.message(1, |b| {
            b.string(1, "basic");
            b.string(2, str_of(s, "description"));
            vendor_extensions(b, 3, s);
        }),
        _ => w.message(2, |k| {
            k.string(1, str_of(s, "type"));
            k.string(2, str_of(s, "name"));
            k.string(3, str_of(s, "in"));
            k.string(4, str_of(s, "description"));
            vendor_extensions(k, 5, s);
        }),
    }
}

/// `PathItem`: the operations by method, the common parameters, the extensions.
fn path_item(w: &mut Writer, item: &Value) {
    let empty = Map::new();
    let item = item.as_object().unwrap_or(&empty);
    w.string(1, str_of(item, "$ref"));
    for (tag, method) in [
        (2, "get"),
        (3, "put"),
        (4, "post"),
        (5, "delete"),
        (6, "options"),
        (7, "head"),
        (8, "patch"),
    ] {
        if let Some(op) = item.get(method).and_then(Value::as_object) {
            w.message(tag, |o| operation(o, op));
        }
    }
    parameters(w, 9, item.get("parameters"));
    vendor_extensions(w, 10, item);
}

fn operation(w: &mut Writer, op: &Map<String, Value>) {
    strings(w, 1, op.get("tags"));
    w.string(2, str_of(op, "summary"));
    w.string(3, str_of(op, "description"));
    w.string(5, str_of(op, "operationId"));
    strings(w, 6, op.get("produces"));
    strings(w, 7, op.get("consumes"));
    parameters(w, 8, op.get("parameters"));
    if let Some(responses) = op.get("responses").and_then(Value::as_object) {
        w.message(9, |r| {
            for (code, response) in responses.iter().filter(|(k, _)| !k.starts_with("x-")) {
                r.message(1, |named| {
                    named.string(1, code);
                    named.message(2, |value| response_value(value, response));
                });
            }
            vendor_extensions(r, 2, responses);
        });
    }
    strings(w, 10, op.get("schemes"));
    w.boolean(11, bool_of(op, "deprecated"));
    for requirement in op
        .get("security")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        w.message(12, |r| security_requirement(r, requirement));
    }
    vendor_extensions(w, 13, op);
}

/// `ResponseValue`: a `$ref` (`JsonReference`) or a `Response`.
fn response_value(w: &mut Writer, response: &Value) {
    let empty = Map::new();
    let r = response.as_object().unwrap_or(&empty);
    if let Some(reference) = r.get("$ref").and_then(Value::as_str) {
        w.message(2, |j| {
            j.string(1, reference);
            j.string(2, str_of(r, "description"));
        });
        return;
    }
    w.message(1, |resp| {
        resp.string(1, str_of(r, "description"));
        if let Some(s) = r.get("schema") {
            // SchemaItem { oneof { Schema schema = 1; FileSchema file_schema = 2; } }
            resp.message(2, |item| item.message(1, |m| schema(m, s)));
        }
        vendor_extensions(resp, 5, r);
    });
}

/// `repeated ParametersItem`: each a `$ref` or a body or non-body `Parameter`.
fn parameters(w: &mut Writer, tag: u32, list: Option<&Value>) {
    for p in list.and_then(Value::as_array).into_iter().flatten() {
        let Some(p) = p.as_object() else { continue };
        w.message(tag, |item| {
            if let Some(reference) = p.get("$ref").and_then(Value::as_str) {
                item.message(2, |j| {
                    j.string(1, reference);
                    j.string(2, str_of(p, "description"));
                });
            } else {
                item.message(1, |param| parameter(param, p));
            }
        });
    }
}

/// `Parameter { oneof { BodyParameter body_parameter = 1; NonBodyParameter non_body_parameter = 2; } }`.
fn parameter(w: &mut Writer, p: &Map<String, Value>) {
    let location = str_of(p, "in");
    if location == "body" {
        w.message(1, |b| {
            b.string(1, str_of(p, "description"));
            b.string(2, str_of(p, "name"));
            b.string(3, location);
            b.boolean(4, bool_of(p, "required"));
            if let Some(s) = p.get("schema") {
                b.message(5, |m| schema(m, s));
            }
            vendor_extensions(b, 6, p);
        });
        return;
    }
    // NonBodyParameter's oneof: header = 1, formData = 2, query = 3, path = 4. The four
    // sub-schemas share their first fields; query and formData have allowEmptyValue at 5 and
    // so every later field one further.
    let (choice, shifted) = match location {
        "header" => (1, false),
        "formData" => (2, true),
        "path" => (4, false),
        _ => (3, true),
    };
    let at = |n: u32| if shifted { n + 1 } else { n };
    w.message(2, |non_body| {
        non_body.message(choice, |s| {
            s.boolean(1, bool_of(p, "required"));
            s.string(2, location);
            s.string(3, str_of(p, "description"));
            s.string(4, str_of(p, "name"));
            if shifted {
                s.boolean(5, bool_of(p, "allowEmptyValue"));
            }
            s.string(at(5), str_of(p, "type"));
            s.string(at(6), str_of(p, "format"));
            s.string(at(8), str_of(p, "collectionFormat"));
            if let Some(default) = p.get("default") {
                any(s, at(9), default);
            }
            s.boolean(at(19), bool_of(p, "uniqueItems"));
            for value in p
                .get("enum")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                any(s, at(20), value);
            }
            vendor_extensions(s, at(22), p);
        });
    });
}

/// `repeated NamedSchema` of a JSON object of schemas (definitions, properties).
fn named_schemas(w: &mut Writer, tag: u32, schemas: &Map<String, Value>) {
    for (name, s) in schemas {
        w.message(tag, |named| {
            named.string(1, name);
            named.message(2, |m| schema(m, s));
        });
    }
}

/// `Schema`, the JSON Schema subset of Swagger 2.0.
fn schema(w: &mut Writer, s: &Value) {
    let empty = Map::new();
    let s = s.as_object().unwrap_or(&empty);
    let number = |key: &str| s.get(key).and_then(Value::as_f64).unwrap_or_default();
    let integer = |key: &str| s.get(key).and_then(Value::as_i64).unwrap_or_default();
    w.string(1, str_of(s, "$ref"));
    w.string(2, str_of(s, "format"));
    w.string(3, str_of(s, "title"));
    w.string(4, str_of(s, "description"));
    if let Some(default) = s.get("default") {
        any(w, 5, default);
    }
    w.double(6, number("multipleOf"));
    w.double(7, number("maximum"));
    w.boolean(8, bool_of(s, "exclusiveMaximum"));
    w.double(9, number("minimum"));
    w.boolean(10, bool_of(s, "exclusiveMinimum"));
    w.int64(11, integer("maxLength"));
    w.int64(12, integer("minLength"));
    w.string(13, str_of(s, "pattern"));
    w.int64(14, integer("maxItems"));
    w.int64(15, integer("minItems"));
    w.boolean(16, bool_of(s, "uniqueItems"));
    w.int64(17, integer("maxProperties"));
    w.int64(18, integer("minProperties"));
    strings(w, 19, s.get("required"));
    for value in s
        .get("enum")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        any(w, 20, value);
    }
    match s.get("additionalProperties") {
        // AdditionalPropertiesItem { oneof { Schema schema = 1; bool boolean = 2; } }: the
        // choice is written even when it is `false`.
        Some(Value::Bool(b)) => w.message(21, |a| {
            a.key(2, VARINT);
            a.varint(u64::from(*b));
        }),
        Some(additional @ Value::Object(_)) => {
            w.message(21, |a| a.message(1, |m| schema(m, additional)))
        }
        _ => {}
    }
    match s.get("type") {
        Some(Value::String(t)) => w.message(22, |ty| ty.string_always(1, t)),
        Some(types @ Value::Array(_)) => w.message(22, |ty| strings(ty, 1, Some(types))),
        _ => {}
    }
    match s.get("items") {
        Some(Value::Array(items)) => w.message(23, |i| {
            for item in items {
                i.message(1, |m| schema(m, item));
            }
        }),
        Some(item @ Value::Object(_)) => w.message(23, |i| i.message(1, |m| schema(m, item))),
        _ => {}
    }
    for part in s
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        w.message(24, |m| schema(m, part));
    }
    if let Some(properties) = s.get("properties").and_then(Value::as_object) {
        w.message(25, |p| named_schemas(p, 1, properties));
    }
    w.string(26, str_of(s, "discriminator"));
    w.boolean(27, bool_of(s, "readOnly"));
    if let Some(example) = s.get("example") {
        any(w, 30, example);
    }
    vendor_extensions(w, 31, s);
}

#[cfg(test)]
pub(crate) mod tests {
    //! A protobuf reader for what [`encode`] wrote: fields by number, nothing of gnostic's
    //! schema, so that a wrong field number in the encoder shows as a missing field here.

    use super::*;
    use serde_json::json;

    /// One field of a decoded message.
    #[derive(Debug, Clone)]
    pub(crate) enum Field {
        Varint(u64),
        Fixed64(u64),
        Bytes(Vec<u8>),
    }

    /// A decoded message: its fields in wire order.
    #[derive(Debug, Clone, Default)]
    pub(crate) struct Message(pub(crate) Vec<(u32, Field)>);

    fn read_varint(data: &[u8], at: &mut usize) -> u64 {
        let mut value = 0u64;
        let mut shift = 0;
        loop {
            let byte = data[*at];
            *at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return value;
            }
            shift += 7;
            assert!(shift < 64, "varint too long");
        }
    }

    impl Message {
        /// Parses `data`; panics on malformed protobuf (which the encoder must never write).
        pub(crate) fn parse(data: &[u8]) -> Message {
            let mut fields = Vec::new();
            let mut at = 0;
            while at < data.len() {
                let key = read_varint(data, &mut at);
                let tag = (key >> 3) as u32;
                assert!(tag > 0, "field number 0");
                let field = match (key & 7) as u32 {
                    VARINT => Field::Varint(read_varint(data, &mut at)),
                    FIXED64 => {
                        let bytes: [u8; 8] = data[at..at + 8].try_into().unwrap();
                        at += 8;
                        Field::Fixed64(u64::from_le_bytes(bytes))
                    }
                    LEN => {
                        let len = read_varint(data, &mut at) as usize;
                        let bytes = data[at..at + len].to_vec();
                        at += len;
                        Field::Bytes(bytes)
                    }
                    other => panic!("wire type {other} at field {tag}"),
                };
                fields.push((tag, field));
            }
            assert_eq!(at, data.len(), "message overruns its bytes");
            Message(fields)
        }

        fn all_bytes(&self, tag: u32) -> impl Iterator<Item = &[u8]> {
            self.0.iter().filter_map(move |(t, f)| match f {
                Field::Bytes(b) if *t == tag => Some(b.as_slice()),
                _ => None,
            })
        }

        /// Every occurrence of the message field `tag`.
        pub(crate) fn messages(&self, tag: u32) -> Vec<Message> {
            self.all_bytes(tag).map(Message::parse).collect()
        }

        /// The message field `tag` (the last occurrence, as protobuf merges them).
        pub(crate) fn message(&self, tag: u32) -> Option<Message> {
            self.all_bytes(tag).last().map(Message::parse)
        }

        /// Every occurrence of the string field `tag`.
        pub(crate) fn strings(&self, tag: u32) -> Vec<String> {
            self.all_bytes(tag)
                .map(|b| String::from_utf8(b.to_vec()).expect("UTF-8 string field"))
                .collect()
        }

        /// The string field `tag`, "" when absent.
        pub(crate) fn string(&self, tag: u32) -> String {
            self.strings(tag).pop().unwrap_or_default()
        }

        /// The varint field `tag`, if present.
        pub(crate) fn varint(&self, tag: u32) -> Option<u64> {
            self.0.iter().rev().find_map(|(t, f)| match f {
                Field::Varint(v) if *t == tag => Some(*v),
                _ => None,
            })
        }

        /// The double field `tag`, if present.
        pub(crate) fn double(&self, tag: u32) -> Option<f64> {
            self.0.iter().rev().find_map(|(t, f)| match f {
                Field::Fixed64(v) if *t == tag => Some(f64::from_bits(*v)),
                _ => None,
            })
        }

        /// Named entries (`NamedX { name = 1; value = 2 }`) of the repeated field `tag`.
        pub(crate) fn named(&self, tag: u32) -> Vec<(String, Message)> {
            self.messages(tag)
                .into_iter()
                .map(|n| (n.string(1), n.message(2).unwrap_or_default()))
                .collect()
        }

        /// The vendor extensions in the repeated `NamedAny` field `tag`, their YAML read back
        /// (as YAML's flow syntax, which is JSON).
        pub(crate) fn extensions(&self, tag: u32) -> Map<String, Value> {
            self.named(tag)
                .into_iter()
                .map(|(name, any)| {
                    let yaml = any.string(2);
                    let value = serde_json::from_str(&yaml)
                        .unwrap_or_else(|e| panic!("{name}: {yaml:?}: {e}"));
                    (name, value)
                })
                .collect()
        }
    }

    #[test]
    fn writes_the_wire_format_by_hand() {
        // Info { title = 1: "K", version = 2: "v1" }, as protoc would write it.
        let bytes = encode(&json!({"swagger": "2.0", "info": {"title": "K", "version": "v1"}}));
        assert_eq!(
            bytes,
            [
                0x0a, 3, b'2', b'.', b'0', // swagger
                0x12, 7, 0x0a, 1, b'K', 0x12, 2, b'v', b'1', // info
            ]
        );
        let mut w = Writer::default();
        w.varint(300);
        w.int64(11, -1);
        assert_eq!(&w.buf[..2], [0xac, 0x02]);
        // A negative int64 is ten bytes of varint, as protobuf writes it.
        assert_eq!(w.buf.len(), 2 + 1 + 10);
    }

    #[test]
    fn shared_parameters_are_written_by_name() {
        let doc = json!({"parameters": {
            "body-x": {"name": "body", "in": "body", "required": true, "schema": {"type": "object"}},
            "pretty-y": {"name": "pretty", "in": "query", "type": "string", "uniqueItems": true},
        }});
        let decoded = Message::parse(&encode(&doc));
        let shared = decoded.message(10).expect("ParameterDefinitions").named(1);
        let names: Vec<&str> = shared.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["body-x", "pretty-y"]);
        let body = shared[0].1.message(1).expect("a BodyParameter");
        assert_eq!(
            (body.string(2), body.string(3)),
            ("body".into(), "body".into())
        );
        assert_eq!(body.varint(4), Some(1));
        // NonBodyParameter's query choice (3): name at 4, type at 6.
        let query = shared[1]
            .1
            .message(2)
            .unwrap()
            .message(3)
            .expect("a query parameter");
        assert_eq!(
            (query.string(4), query.string(6)),
            ("pretty".into(), "string".into())
        );
    }

    #[test]
    fn schemas_round_trip_field_by_field() {
        let s = json!({
            "$ref": "#/definitions/x",
            "description": "d",
            "default": {},
            "format": "int32",
            "maximum": 5.5,
            "minLength": 2,
            "required": ["a", "b"],
            "enum": ["A", 1],
            "type": "object",
            "additionalProperties": false,
            "items": {"type": "string"},
            "properties": {"a": {"type": "string"}, "empty": {"type": "object", "properties": {}}},
            "uniqueItems": true,
            "x-kubernetes-patch-strategy": "merge",
            "x-kubernetes-group-version-kind": [{"group": "", "kind": "Pod", "version": "v1"}],
        });
        let doc = json!({"definitions": {"x": s}});
        let decoded = Message::parse(&encode(&doc));
        let definitions = decoded.message(9).unwrap().named(1);
        assert_eq!(definitions.len(), 1);
        let (name, m) = &definitions[0];
        assert_eq!(name, "x");
        assert_eq!(m.string(1), "#/definitions/x");
        assert_eq!(m.string(2), "int32");
        assert_eq!(m.string(4), "d");
        assert_eq!(m.message(5).unwrap().string(2), "{}");
        assert_eq!(m.double(7), Some(5.5));
        assert_eq!(m.varint(12), Some(2));
        assert_eq!(m.varint(16), Some(1));
        assert_eq!(m.strings(19), ["a", "b"]);
        let enums: Vec<String> = m.messages(20).iter().map(|a| a.string(2)).collect();
        assert_eq!(enums, ["\"A\"", "1"]);
        // additionalProperties: false is the oneof's boolean, present with value 0.
        assert_eq!(m.message(21).unwrap().varint(2), Some(0));
        assert_eq!(m.message(22).unwrap().strings(1), ["object"]);
        let items = m.message(23).unwrap().messages(1);
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].message(22).unwrap().strings(1), ["string"]);
        let properties = m.message(25).unwrap().named(1);
        assert_eq!(properties[0].0, "a");
        // An empty properties message is still there: an object with no fields.
        assert_eq!(properties[1].0, "empty");
        assert!(properties[1].1.message(25).is_some());
        let extensions = m.extensions(31);
        assert_eq!(extensions["x-kubernetes-patch-strategy"], "merge");
        assert_eq!(
            extensions["x-kubernetes-group-version-kind"][0]["kind"],
            "Pod"
        );
    }

    #[test]
    fn parameters_take_their_oneof_branch() {
        let doc = json!({"paths": {"/p": {
            "parameters": [{"name": "name", "in": "path", "type": "string", "required": true,
                            "uniqueItems": true, "description": "n"}],
            "patch": {
                "operationId": "patchP",
                "consumes": ["application/json-patch+json"],
                "parameters": [
                    {"name": "body", "in": "body", "required": true,
                     "schema": {"$ref": "#/definitions/Patch"}},
                    {"name": "fieldValidation", "in": "query", "type": "string",
                     "uniqueItems": true},
                    {"$ref": "#/parameters/pretty"},
                ],
                "responses": {"200": {"description": "OK",
                                      "schema": {"$ref": "#/definitions/P"}}},
                "x-kubernetes-group-version-kind": {"group": "", "kind": "P", "version": "v1"},
            },
        }}});
        let decoded = Message::parse(&encode(&doc));
        let paths = decoded.message(8).unwrap().named(2);
        let (path, item) = &paths[0];
        assert_eq!(path, "/p");
        // PathItem.parameters = 9 → Parameter = 1 → NonBodyParameter = 2 → path = 4.
        let common = item.messages(9);
        let path_param = common[0]
            .message(1)
            .unwrap()
            .message(2)
            .unwrap()
            .message(4)
            .unwrap();
        assert_eq!(path_param.varint(1), Some(1));
        assert_eq!(path_param.string(2), "path");
        assert_eq!(path_param.string(4), "name");
        assert_eq!(path_param.string(5), "string");
        assert_eq!(path_param.varint(19), Some(1));

        let patch = item.message(8).unwrap();
        assert_eq!(patch.string(5), "patchP");
        assert_eq!(patch.strings(7), ["application/json-patch+json"]);
        let params = patch.messages(8);
        let body = params[0].message(1).unwrap().message(1).unwrap();
        assert_eq!(body.string(2), "body");
        assert_eq!(body.string(3), "body");
        assert_eq!(body.message(5).unwrap().string(1), "#/definitions/Patch");
        // Query: NonBodyParameter = 2 → query = 3, name = 4, type = 6, uniqueItems = 20.
        let query = params[1]
            .message(1)
            .unwrap()
            .message(2)
            .unwrap()
            .message(3)
            .unwrap();
        assert_eq!(query.string(4), "fieldValidation");
        assert_eq!(query.string(6), "string");
        assert_eq!(query.varint(20), Some(1));
        assert_eq!(
            params[2].message(2).unwrap().string(1),
            "#/parameters/pretty"
        );
        // Responses.response_code = 1 → ResponseValue.response = 1 → schema = 2 → Schema = 1.
        let responses = patch.message(9).unwrap().named(1);
        assert_eq!(responses[0].0, "200");
        let response = responses[0].1.message(1).unwrap();
        assert_eq!(response.string(1), "OK");
        assert_eq!(
            response.message(2).unwrap().message(1).unwrap().string(1),
            "#/definitions/P"
        );
        assert_eq!(
            patch.extensions(13)["x-kubernetes-group-version-kind"]["kind"],
            "P"
        );
    }
}
