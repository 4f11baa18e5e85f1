//! Content negotiation for responses: plain JSON objects and lists, YAML, or server-side Tables
//! (`application/json;as=Table;v=v1;g=meta.k8s.io`), as the client's Accept header asks.

use http::{HeaderMap, StatusCode};
use serde_json::{Value, json};
use skiff_kinds::Kind;

use crate::error::{Error, Result};
use crate::request::{Query, Response};
use skiff_kinds::table;

/// How a response is rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Format {
    /// JSON objects and lists.
    Json,
    /// YAML objects and lists.
    Yaml,
    /// A `meta.k8s.io` Table of the given version (`v1` or `v1beta1`).
    Table {
        /// The Table's apiVersion.
        api_version: &'static str,
        /// What each row's `object` carries.
        include: table::IncludeObject,
    },
}

impl Format {
    /// Picks the first acceptable media type of the Accept header, in the client's order.
    pub fn negotiate(headers: &HeaderMap, query: &Query) -> Result<Format> {
        let accept = headers
            .get_all(http::header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect::<Vec<_>>()
            .join(",");
        if accept.trim().is_empty() {
            return Ok(Format::Json);
        }
        let include = match query.get("includeObject") {
            Some("None") => table::IncludeObject::None,
            Some("Object") => table::IncludeObject::Object,
            _ => table::IncludeObject::Metadata,
        };
        for item in accept.split(',') {
            let mut parts = item.split(';').map(str::trim);
            let media = parts.next().unwrap_or("");
            let params: Vec<(&str, &str)> = parts
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.trim(), v.trim()))
                .collect();
            let param = |name: &str| params.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
            match media {
                "application/json" | "application/*" | "*/*" => match param("as") {
                    Some("Table") if param("g") == Some("meta.k8s.io") => {
                        let api_version = match param("v") {
                            Some("v1") => "meta.k8s.io/v1",
                            Some("v1beta1") => "meta.k8s.io/v1beta1",
                            _ => continue,
                        };
                        return Ok(Format::Table {
                            api_version,
                            include,
                        });
                    }
                    Some(_) => continue,
                    None => return Ok(Format::Json),
                },
                "application/yaml" => return Ok(Format::Yaml),
                _ => continue,
            }
        }
        Err(Error::NotAcceptable(
            "only the following media types are accepted: application/json, application/yaml, application/json;as=Table;v=v1;g=meta.k8s.io".into(),
        ))
    }

    fn respond(&self, code: StatusCode, body: &Value) -> Response {
        let (bytes, content_type) = match self {
            Format::Yaml => (
                serde_saphyr::to_string(body)
                    .unwrap_or_default()
                    .into_bytes(),
                "application/yaml",
            ),
            _ => (
                serde_json::to_vec(body).unwrap_or_default(),
                "application/json",
            ),
        };
        let mut response = Response::new(bytes.into());
        *response.status_mut() = code;
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static(content_type),
        );
        response
    }

    /// One object.
    pub fn object(&self, kind: &dyn Kind, code: StatusCode, mut object: Value) -> Response {
        skiff_kinds::to_served(kind, &mut object);
        match self {
            Format::Table {
                api_version,
                include,
            } => {
                let rv = object
                    .pointer("/metadata/resourceVersion")
                    .cloned()
                    .unwrap_or(json!(""));
                let table = table::to_table(
                    kind,
                    vec![object],
                    json!({"resourceVersion": rv}),
                    *include,
                    api_version,
                );
                self.respond(code, &table)
            }
            _ => self.respond(code, &object),
        }
    }

    /// A list with its metadata.
    pub fn list(&self, kind: &dyn Kind, metadata: Value, mut items: Vec<Value>) -> Response {
        for item in &mut items {
            skiff_kinds::to_served(kind, item);
        }
        match self {
            Format::Table {
                api_version,
                include,
            } => self.respond(
                StatusCode::OK,
                &table::to_table(kind, items, metadata, *include, api_version),
            ),
            _ => self.respond(
                StatusCode::OK,
                &json!({
                    "kind": kind.info().list_kind(),
                    "apiVersion": kind.info().api_version(),
                    "metadata": metadata,
                    "items": items,
                }),
            ),
        }
    }

    /// The `object` of one watch event.
    pub fn watch_object(&self, kind: &dyn Kind, object: &Value) -> Value {
        if skiff_kinds::converts(kind) {
            let mut object = object.clone();
            skiff_kinds::to_served(kind, &mut object);
            return self.watch_object_as_is(kind, &object);
        }
        self.watch_object_as_is(kind, object)
    }

    fn watch_object_as_is(&self, kind: &dyn Kind, object: &Value) -> Value {
        match self {
            Format::Table {
                api_version,
                include,
            } => {
                let rv = object
                    .pointer("/metadata/resourceVersion")
                    .cloned()
                    .unwrap_or(json!(""));
                table::to_table(
                    kind,
                    vec![object.clone()],
                    json!({"resourceVersion": rv}),
                    *include,
                    api_version,
                )
            }
            _ => object.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(value: &str) -> Result<Format> {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::ACCEPT, value.parse().unwrap());
        Format::negotiate(&headers, &Query::default())
    }

    #[test]
    fn kubectl_get_asks_for_a_table() {
        let f = accept("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json").unwrap();
        assert!(matches!(
            f,
            Format::Table {
                api_version: "meta.k8s.io/v1",
                ..
            }
        ));
    }

    #[test]
    fn protobuf_falls_back_to_json_and_nothing_acceptable_is_406() {
        assert_eq!(
            accept("application/vnd.kubernetes.protobuf,application/json").unwrap(),
            Format::Json
        );
        assert_eq!(accept("application/json, */*").unwrap(), Format::Json);
        assert_eq!(accept("application/yaml").unwrap(), Format::Yaml);
        assert!(matches!(
            accept("application/vnd.kubernetes.protobuf"),
            Err(Error::NotAcceptable(_))
        ));
    }
}
