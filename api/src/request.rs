//! A request as the API server sees it once routing has read it: the method, path, parsed query,
//! headers, size-checked body and the user it acts as; what its URL names ([`Target`], from
//! [`parse_path`]); and its body decoded ([`parse_body`]). The routes build it, the handlers, the
//! authorizer, metrics and renderers read it; it depends on none of them.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Method};
use serde_json::Value;
use skiff_kinds::{Kind, Snapshot};
use skiff_meta::ResourceInfo;

use crate::error::{Error, Result};

/// A request, as the handlers see it.
pub struct Request {
    /// The HTTP method.
    pub method: Method,
    /// The URL path.
    pub path: String,
    /// The query parameters.
    pub query: Query,
    /// The headers.
    pub headers: HeaderMap,
    /// The body (already size-checked).
    pub body: Bytes,
    /// The user the request acts as (authenticated, and impersonated where asked).
    pub user: crate::auth::User,
    /// The connection's upgrade, for requests that ask to switch protocols (exec, attach,
    /// port-forward); hyper completes it once a 101 answer was sent.
    pub upgrade: Option<hyper::upgrade::OnUpgrade>,
    /// Closes the connection the request came on (set by the connection loop): a watch whose
    /// client stopped reading is ended this way.
    pub connection: Option<crate::limits::Connection>,
    /// Admission's warnings for the client, which the route adds to the response whether it
    /// succeeds or not, and its annotations for the audit event.
    pub feedback: std::sync::Arc<crate::admission::Feedback>,
}

/// Query parameters.
#[derive(Debug, Default, Clone)]
pub struct Query(Vec<(String, String)>);

impl Query {
    /// Parses a raw query string.
    pub fn parse(raw: &str) -> Query {
        Query(
            form_urlencoded::parse(raw.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    /// Every pair, in order.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The first value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Whether `key` is set to a true value (`true`, `1`).
    pub fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1" | "True"))
    }

    /// The value of `key` parsed as a number; a malformed one is a 400.
    pub fn number<T: std::str::FromStr>(&self, key: &str) -> Result<Option<T>> {
        self.get(key)
            .filter(|v| !v.is_empty())
            .map(|v| {
                v.parse()
                    .map_err(|_| Error::BadRequest(format!("invalid value for {key}: {v:?}")))
            })
            .transpose()
    }
}

/// What a URL names.
#[derive(Debug, Clone)]
pub struct Target {
    /// The kind served there.
    pub kind: Arc<dyn Kind>,
    /// The resource.
    pub info: &'static ResourceInfo,
    /// The namespace in the URL.
    pub namespace: Option<String>,
    /// The object's name, for object URLs.
    pub name: Option<String>,
    /// The subresource, if any.
    pub subresource: Option<String>,
    /// For a `proxy` subresource, the rest of the URL path after `proxy`, as sent (`""`, `/`,
    /// `/some/page`): the path the backend gets.
    pub proxy_path: Option<String>,
}

/// Parses a resource URL: `/api/v1/[namespaces/NS/]PLURAL[/NAME[/SUB]]` or the same under
/// `/apis/GROUP/VERSION`, and `.../NAME/proxy/ANY/PATH`. `None` for paths that are not resource
/// paths (discovery and the like).
pub fn parse_path(kinds: &Snapshot, path: &str) -> Option<Result<Target>> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] if !rest.is_empty() => ("", *version, rest),
        ["apis", group, version, rest @ ..] if !rest.is_empty() => (*group, *version, rest),
        _ => return None,
    };
    let namespaced_target = match rest {
        ["namespaces", ns, plural, tail @ ..] => kinds
            .lookup(group, version, plural)
            .filter(|kind| kind.info().namespaced)
            .map(|kind| (kind, Some(*ns), tail)),
        _ => None,
    };
    let (kind, namespace, tail) = match namespaced_target {
        Some(found) => found,
        None => {
            let Some(kind) = kinds.lookup(group, version, rest[0]) else {
                return Some(Err(Error::NoRoute));
            };
            (kind, None, &rest[1..])
        }
    };
    // A proxy path goes on to the backend as it was sent, empty segments and all.
    let proxy_path = (tail.get(1) == Some(&"proxy")).then(|| {
        let before = segments.len() - tail.len() + 2;
        path_after_segments(path, before).to_string()
    });
    let tail = if proxy_path.is_some() {
        &tail[..2]
    } else {
        tail
    };
    if tail.len() > 2 {
        return Some(Err(Error::NoRoute));
    }
    for segment in namespace.iter().chain(tail.iter()) {
        if matches!(*segment, "." | "..") || segment.contains('%') {
            return Some(Err(Error::BadRequest(format!(
                "invalid path segment {segment:?}"
            ))));
        }
    }
    Some(Ok(Target {
        info: kind.info(),
        kind: kind.clone(),
        namespace: namespace.map(str::to_string),
        name: tail.first().map(|s| s.to_string()),
        subresource: tail.get(1).map(|s| s.to_string()),
        proxy_path,
    }))
}

/// The part of `path` after its first `n` non-empty segments.
fn path_after_segments(path: &str, n: usize) -> &str {
    let mut seen = 0;
    let mut in_segment = false;
    for (i, c) in path.char_indices() {
        if c == '/' {
            if in_segment {
                in_segment = false;
                if seen == n {
                    return &path[i..];
                }
            }
        } else if !in_segment {
            in_segment = true;
            seen += 1;
        }
    }
    ""
}

/// A response body and status, rendered as the client asked.
pub type Response = warp::reply::Response;

/// Parses a request body as JSON or YAML into an object.
pub fn parse_body(request: &Request) -> Result<Value> {
    let content_type = request
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let value: Value = if skiff_kinds::protobuf::is_content_type(content_type) {
        skiff_kinds::protobuf::decode(&request.body).map_err(|e| {
            Error::BadRequest(format!("error decoding the protobuf request body: {e}"))
        })?
    } else if content_type.contains("yaml") {
        let text = std::str::from_utf8(&request.body)
            .map_err(|_| Error::BadRequest("request body is not UTF-8".into()))?;
        serde_saphyr::from_str(text)
            .map_err(|e| Error::BadRequest(format!("error decoding YAML: {e}")))?
    } else if content_type.starts_with("application/json")
        || content_type.starts_with("*/*")
        || content_type.is_empty()
    {
        serde_json::from_slice(&request.body).map_err(|e| {
            Error::BadRequest(format!("couldn't get version/kind; json parse error: {e}"))
        })?
    } else {
        return Err(Error::UnsupportedMediaType(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {content_type})"
        )));
    };
    if !value.is_object() {
        return Err(Error::BadRequest(
            "the request body must be a JSON object".into(),
        ));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_kinds::Kinds;

    #[test]
    fn parses_resource_paths() {
        let t = parse_path(
            &Kinds::builtin().snapshot(),
            "/api/v1/namespaces/default/pods/web/status",
        )
        .unwrap()
        .unwrap();
        assert_eq!(t.info.plural, "pods");
        assert_eq!(t.namespace.as_deref(), Some("default"));
        assert_eq!(t.name.as_deref(), Some("web"));
        assert_eq!(t.subresource.as_deref(), Some("status"));

        let t = parse_path(&Kinds::builtin().snapshot(), "/api/v1/namespaces/bar")
            .unwrap()
            .unwrap();
        assert_eq!(t.info.plural, "namespaces");
        assert_eq!(t.name.as_deref(), Some("bar"));
        assert!(t.namespace.is_none());

        let t = parse_path(
            &Kinds::builtin().snapshot(),
            "/api/v1/namespaces/bar/finalize",
        )
        .unwrap()
        .unwrap();
        assert_eq!(t.info.plural, "namespaces");
        assert_eq!(t.subresource.as_deref(), Some("finalize"));

        let t = parse_path(&Kinds::builtin().snapshot(), "/apis/apps/v1/deployments")
            .unwrap()
            .unwrap();
        assert_eq!(t.info.kind, "Deployment");
        assert!(t.namespace.is_none() && t.name.is_none());

        let t = parse_path(&Kinds::builtin().snapshot(), "/api/v1/nodes/n1")
            .unwrap()
            .unwrap();
        assert_eq!(t.info.kind, "Node");

        assert!(matches!(
            parse_path(&Kinds::builtin().snapshot(), "/api/v1/widgets"),
            Some(Err(Error::NoRoute))
        ));
        assert!(matches!(
            parse_path(&Kinds::builtin().snapshot(), "/apis/example.com/v1/widgets"),
            Some(Err(Error::NoRoute))
        ));
        assert!(parse_path(&Kinds::builtin().snapshot(), "/api/v1").is_none());
        assert!(matches!(
            parse_path(&Kinds::builtin().snapshot(), "/api/v1/nodes/n1/status/more"),
            Some(Err(Error::NoRoute))
        ));
        assert!(parse_path(&Kinds::builtin().snapshot(), "/apis").is_none());
        assert!(parse_path(&Kinds::builtin().snapshot(), "/version").is_none());
    }

    #[test]
    fn proxy_paths_keep_everything_after_proxy() {
        let kinds = Kinds::builtin().snapshot();
        let parse = |path| parse_path(&kinds, path).unwrap().unwrap();
        let t = parse("/api/v1/namespaces/default/pods/https:web:8443/proxy/a//b/%20c");
        assert_eq!(t.name.as_deref(), Some("https:web:8443"));
        assert_eq!(t.subresource.as_deref(), Some("proxy"));
        assert_eq!(t.proxy_path.as_deref(), Some("/a//b/%20c"));
        let t = parse("/api/v1/namespaces/default/services/web:http/proxy");
        assert_eq!(t.info.kind, "Service");
        assert_eq!(t.proxy_path.as_deref(), Some(""));
        let t = parse("/api/v1/nodes/n1/proxy/");
        assert_eq!(t.name.as_deref(), Some("n1"));
        assert_eq!(t.proxy_path.as_deref(), Some("/"));
        let t = parse("/api/v1/nodes/n1/proxy/metrics/cadvisor");
        assert_eq!(t.proxy_path.as_deref(), Some("/metrics/cadvisor"));
        // Only `proxy` takes a path; other subresources stay two segments long.
        assert!(
            parse("/api/v1/namespaces/default/pods/web/log")
                .proxy_path
                .is_none()
        );
    }
}
