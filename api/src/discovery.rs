//! API discovery of the kinds served now ([`skiff_kinds::Kinds`]): `/api` and `/apis` (aggregated
//! `apidiscovery.k8s.io` v2/v2beta1 when the Accept header asks for it, else the legacy
//! `APIVersions` / `APIGroupList`), `/api/v1` and `/apis/{group}/{version}` (`APIResourceList`)
//! and `/apis/{group}` (`APIGroup`).
//!
//! kubectl decides between aggregated and legacy discovery by the response Content-Type alone,
//! so the aggregated body must be sent as
//! `application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList`.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    APIGroup, APIGroupList, APIResource, APIResourceList, APIVersions, GroupVersionForDiscovery,
    ServerAddressByClientCIDR,
};
use serde_json::{Value, json};
use skiff_kinds::media::media_ranges;
use skiff_kinds::{Kinds, Snapshot};
use skiff_meta::ResourceInfo;
use warp::Filter;
use warp::Reply as _;
use warp::filters::BoxedFilter;
use warp::reply::Response;

/// The group of aggregated discovery documents.
pub const AGGREGATED_GROUP: &str = "apidiscovery.k8s.io";

/// A version of aggregated discovery a client accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggregatedVersion {
    /// `apidiscovery.k8s.io/v2` (Kubernetes 1.30+).
    V2,
    /// `apidiscovery.k8s.io/v2beta1` (Kubernetes 1.26 to 1.32).
    V2Beta1,
}

impl AggregatedVersion {
    /// The version segment: `v2` or `v2beta1`.
    pub fn as_str(self) -> &'static str {
        match self {
            AggregatedVersion::V2 => "v2",
            AggregatedVersion::V2Beta1 => "v2beta1",
        }
    }

    /// The list's `apiVersion`.
    pub fn api_version(self) -> String {
        format!("{AGGREGATED_GROUP}/{}", self.as_str())
    }

    /// The response Content-Type that tells clients the body is aggregated discovery.
    pub fn content_type(self) -> String {
        format!(
            "application/json;g={AGGREGATED_GROUP};v={};as=APIGroupDiscoveryList",
            self.as_str()
        )
    }
}

/// Which aggregated discovery version the Accept header asks for, if any: the first range
/// (by preference) that is either aggregated discovery or plain JSON decides.
pub fn negotiate(accept: Option<&str>) -> Option<AggregatedVersion> {
    for range in media_ranges(accept.unwrap_or("")) {
        if range.quality <= 0.0 || !range.accepts_json() {
            continue;
        }
        match (range.param("g"), range.param("v"), range.param("as")) {
            (Some(AGGREGATED_GROUP), Some("v2"), Some("APIGroupDiscoveryList")) => {
                return Some(AggregatedVersion::V2);
            }
            (Some(AGGREGATED_GROUP), Some("v2beta1"), Some("APIGroupDiscoveryList")) => {
                return Some(AggregatedVersion::V2Beta1);
            }
            (None, None, None) => return None,
            // Some other typed form (a Table, ...): not for discovery; look further.
            _ => continue,
        }
    }
    None
}

fn scope(info: &ResourceInfo) -> &'static str {
    if info.namespaced {
        "Namespaced"
    } else {
        "Cluster"
    }
}

fn strings(values: &[&str]) -> Vec<String> {
    values.iter().map(|s| s.to_string()).collect()
}

/// The served resources of one group (empty for core) and version, in table order.
fn resources_of<'a>(
    kinds: &'a Snapshot,
    group: &'a str,
    version: &'a str,
) -> impl Iterator<Item = &'static ResourceInfo> + 'a {
    kinds
        .infos()
        .filter(move |r| r.group == group && r.version == version)
}

/// The versions served for `group` (empty for core), in table order.
fn versions_of(kinds: &Snapshot, group: &str) -> Vec<&'static str> {
    let mut versions: Vec<&'static str> = Vec::new();
    for r in kinds.infos().filter(|r| r.group == group) {
        if !versions.contains(&r.version) {
            versions.push(r.version);
        }
    }
    versions
}

fn aggregated_resource(info: &ResourceInfo) -> Value {
    let mut resource = json!({
        "resource": info.plural,
        "responseKind": { "group": info.group, "version": info.version, "kind": info.kind },
        "scope": scope(info),
        "singularResource": info.singular,
        "verbs": info.verbs,
    });
    if !info.short_names.is_empty() {
        resource["shortNames"] = json!(info.short_names);
    }
    if !info.categories.is_empty() {
        resource["categories"] = json!(info.categories);
    }
    if !info.subresources.is_empty() {
        resource["subresources"] = info
            .subresources
            .iter()
            .map(|sub| {
                json!({
                    "subresource": sub.name,
                    "responseKind": { "group": sub.group, "version": sub.version, "kind": sub.kind },
                    "verbs": sub.verbs,
                })
            })
            .collect();
    }
    resource
}

fn aggregated_group(kinds: &Snapshot, group: &str) -> Value {
    let versions: Vec<Value> = versions_of(kinds, group)
        .into_iter()
        .map(|version| {
            json!({
                "version": version,
                "resources": resources_of(kinds, group, version).map(aggregated_resource).collect::<Vec<_>>(),
                "freshness": "Current",
            })
        })
        .collect();
    json!({ "metadata": { "name": group }, "versions": versions })
}

/// The aggregated discovery document of `/api` (`core == true`: the core group only) or of
/// `/apis` (every named group), as an `APIGroupDiscoveryList` of `version`.
pub fn aggregated(kinds: &Snapshot, core: bool, version: AggregatedVersion) -> Value {
    let items: Vec<Value> = if core {
        vec![aggregated_group(kinds, "")]
    } else {
        kinds
            .groups()
            .into_iter()
            .map(|(group, _)| aggregated_group(kinds, group))
            .collect()
    };
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": version.api_version(),
        "metadata": {},
        "items": items,
    })
}

/// The legacy `/api` body. `server_address` (host:port the client used) fills
/// `serverAddressByClientCIDRs`.
pub fn api_versions(kinds: &Snapshot, server_address: Option<&str>) -> APIVersions {
    APIVersions {
        versions: versions_of(kinds, "")
            .into_iter()
            .map(String::from)
            .collect(),
        server_address_by_client_cidrs: server_address
            .map(|address| ServerAddressByClientCIDR {
                client_cidr: "0.0.0.0/0".to_string(),
                server_address: address.to_string(),
            })
            .into_iter()
            .collect(),
    }
}

fn group_version(group: &str, version: &str) -> GroupVersionForDiscovery {
    GroupVersionForDiscovery {
        group_version: format!("{group}/{version}"),
        version: version.to_string(),
    }
}

/// The `APIGroup` of a served named group, or `None`.
pub fn api_group(kinds: &Snapshot, group: &str) -> Option<APIGroup> {
    if group.is_empty() {
        return None;
    }
    let versions = versions_of(kinds, group);
    let preferred = *versions.first()?;
    Some(APIGroup {
        name: group.to_string(),
        preferred_version: Some(group_version(group, preferred)),
        versions: versions
            .into_iter()
            .map(|v| group_version(group, v))
            .collect(),
        server_address_by_client_cidrs: None,
    })
}

/// The legacy `/apis` body: every named group.
pub fn api_group_list(kinds: &Snapshot) -> APIGroupList {
    APIGroupList {
        groups: kinds
            .groups()
            .into_iter()
            .filter_map(|(group, _)| api_group(kinds, group))
            .collect(),
    }
}

/// [`api_group_list`] as kube-apiserver writes it: the groups inside carry no `kind` or
/// `apiVersion` of their own.
pub fn api_group_list_json(kinds: &Snapshot) -> Value {
    let mut value = serde_json::to_value(api_group_list(kinds)).expect("APIGroupList serializes");
    for group in value["groups"].as_array_mut().into_iter().flatten() {
        if let Some(group) = group.as_object_mut() {
            group.remove("kind");
            group.remove("apiVersion");
        }
    }
    value
}

/// The `APIResourceList` of `group` (empty for core) / `version`, or `None` when not served.
/// Subresources appear as `pods/status` etc.; their `group`/`version` are set only when they
/// differ from the list's (`deployments/scale` speaks `autoscaling/v1`).
pub fn api_resource_list(kinds: &Snapshot, group: &str, version: &str) -> Option<APIResourceList> {
    let mut resources = Vec::new();
    for info in resources_of(kinds, group, version) {
        resources.push(APIResource {
            name: info.plural.to_string(),
            singular_name: info.singular.to_string(),
            namespaced: info.namespaced,
            kind: info.kind.to_string(),
            verbs: strings(info.verbs),
            short_names: (!info.short_names.is_empty()).then(|| strings(info.short_names)),
            categories: (!info.categories.is_empty()).then(|| strings(info.categories)),
            group: None,
            version: None,
            storage_version_hash: None,
        });
        for sub in info.subresources {
            let foreign = sub.group != info.group || sub.version != info.version;
            resources.push(APIResource {
                name: format!("{}/{}", info.plural, sub.name),
                singular_name: String::new(),
                namespaced: info.namespaced,
                kind: sub.kind.to_string(),
                verbs: strings(sub.verbs),
                short_names: None,
                categories: None,
                group: foreign.then(|| sub.group.to_string()),
                version: foreign.then(|| sub.version.to_string()),
                storage_version_hash: None,
            });
        }
    }
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(APIResourceList {
        group_version,
        resources,
    })
}

/// The discovery routes (GET only, no authentication of their own): `/api`, `/apis`,
/// `/api/{version}`, `/apis/{group}`, `/apis/{group}/{version}`. A group or version that is
/// not served gets a 404 `Status`. Paths below these (`/api/v1/pods`) are not matched.
pub fn routes(kinds: Arc<Kinds>) -> BoxedFilter<(Response,)> {
    routes_with(kinds, None)
}

/// [`routes`], with the group-versions of the remote APIServices `aggregator` knows added to
/// `/apis` and `/apis/{group}` ([`crate::aggregation`]; their `/apis/{group}/{version}` is
/// proxied before these routes see it).
pub fn routes_with(
    kinds: Arc<Kinds>,
    aggregator: Option<Arc<crate::aggregation::Aggregator>>,
) -> BoxedFilter<(Response,)> {
    let remote = move || {
        let aggregator = aggregator.clone();
        warp::any().map(move || aggregator.as_ref().map(|a| a.remote()).unwrap_or_default())
    };
    let accept = warp::header::optional::<String>("accept");
    let host = warp::host::optional();
    let snapshot = move || {
        let kinds = kinds.clone();
        warp::any().map(move || kinds.snapshot())
    };
    let api = warp::path!("api")
        .and(snapshot())
        .and(accept)
        .and(host)
        .map(
            |kinds: Arc<Snapshot>, accept: Option<String>, host: Option<http::uri::Authority>| {
                match negotiate(accept.as_deref()) {
                    Some(version) => aggregated_reply(aggregated(&kinds, true, version), version),
                    None => json_reply(&api_versions(&kinds, host.as_ref().map(|h| h.as_str()))),
                }
            },
        );
    let apis = warp::path!("apis")
        .and(snapshot())
        .and(accept)
        .and(remote())
        .map(
            |kinds: Arc<Snapshot>,
             accept: Option<String>,
             remote: Vec<crate::aggregation::Remote>| {
                match negotiate(accept.as_deref()) {
                    Some(version) => {
                        let mut body = aggregated(&kinds, false, version);
                        crate::aggregation::merge_aggregated(&mut body, &remote);
                        aggregated_reply(body, version)
                    }
                    None => {
                        let mut body = api_group_list_json(&kinds);
                        crate::aggregation::merge_legacy(&mut body, &remote);
                        json_reply(&body)
                    }
                }
            },
        );
    let core_version =
        warp::path!("api" / String)
            .and(snapshot())
            .map(|version: String, kinds: Arc<Snapshot>| {
                match api_resource_list(&kinds, "", &version) {
                    Some(list) => json_reply(&list),
                    None => not_found(),
                }
            });
    let group = warp::path!("apis" / String)
        .and(snapshot())
        .and(remote())
        .map(
            |group: String, kinds: Arc<Snapshot>, remote: Vec<crate::aggregation::Remote>| {
                let local = api_group(&kinds, &group)
                    .map(|g| serde_json::to_value(g).expect("APIGroup serializes"));
                match crate::aggregation::merge_group(&group, local, &remote) {
                    Some(group) => json_reply(&group),
                    None => not_found(),
                }
            },
        );
    let group_version = warp::path!("apis" / String / String).and(snapshot()).map(
        |group: String, version: String, kinds: Arc<Snapshot>| match api_resource_list(
            &kinds, &group, &version,
        ) {
            Some(list) => json_reply(&list),
            None => not_found(),
        },
    );
    warp::get()
        .and(
            api.or(apis)
                .unify()
                .or(core_version)
                .unify()
                .or(group)
                .unify()
                .or(group_version)
                .unify(),
        )
        .boxed()
}

fn with_vary(mut response: Response) -> Response {
    // The body depends on Accept: caches must key on it.
    response
        .headers_mut()
        .insert(http::header::VARY, http::HeaderValue::from_static("Accept"));
    response
}

fn aggregated_reply(body: Value, version: AggregatedVersion) -> Response {
    let mut response = warp::reply::json(&body).into_response();
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_str(&version.content_type()).expect("valid header value"),
    );
    with_vary(response)
}

fn json_reply<T: serde::Serialize>(body: &T) -> Response {
    with_vary(warp::reply::json(body).into_response())
}

/// A 404 `Status` as kube-apiserver sends for a path it does not serve.
fn not_found() -> Response {
    crate::routes::error_response(&crate::error::Error::NoRoute)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::testing::{call, get, json};

    /// What kubectl 1.32 sends for `/api` and `/apis`.
    const KUBECTL_ACCEPT: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

    /// A body observed from kubectl's point of view (copied from the team's wire notes).
    fn reference(name: &str) -> Value {
        let path = crate::package_dir()
            .join("testdata/kubectl-wire")
            .join(name);
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[test]
    fn negotiation_follows_the_accept_header() {
        assert_eq!(negotiate(Some(KUBECTL_ACCEPT)), Some(AggregatedVersion::V2));
        assert_eq!(
            negotiate(Some(
                "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
            )),
            Some(AggregatedVersion::V2Beta1)
        );
        assert_eq!(negotiate(Some("application/json, */*")), None);
        assert_eq!(negotiate(None), None);
        // Plain JSON preferred by weight wins over aggregated.
        assert_eq!(
            negotiate(Some(
                "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=0.5,application/json"
            )),
            None
        );
        // An unknown aggregated version is skipped in favour of the next range.
        assert_eq!(
            negotiate(Some(
                "application/json;g=apidiscovery.k8s.io;v=v9;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
            )),
            Some(AggregatedVersion::V2)
        );
    }

    #[tokio::test]
    async fn aggregated_discovery_has_the_content_type_and_fields_kubectl_needs() {
        for (path, core) in [("/api?timeout=32s", true), ("/apis?timeout=32s", false)] {
            let response = call(
                routes(Arc::new(Kinds::builtin())),
                get(path, &[("accept", KUBECTL_ACCEPT)]),
            )
            .await;
            assert_eq!(response.status(), 200);
            assert_eq!(
                response.headers()["content-type"],
                "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
            );
            let body = json(&response);
            assert_eq!(body["kind"], "APIGroupDiscoveryList");
            assert_eq!(body["apiVersion"], "apidiscovery.k8s.io/v2");
            let items = body["items"].as_array().unwrap();
            let kinds = Kinds::builtin().snapshot();
            let served: Vec<&ResourceInfo> = kinds
                .infos()
                .filter(|r| r.group.is_empty() == core)
                .collect();
            let mut seen = 0;
            for item in items {
                let group = item["metadata"]["name"].as_str().unwrap();
                assert_eq!(group.is_empty(), core);
                for version in item["versions"].as_array().unwrap() {
                    assert_eq!(version["freshness"], "Current");
                    for resource in version["resources"].as_array().unwrap() {
                        seen += 1;
                        let info = kinds
                            .lookup(
                                group,
                                version["version"].as_str().unwrap(),
                                resource["resource"].as_str().unwrap(),
                            )
                            .unwrap()
                            .info();
                        assert_eq!(resource["responseKind"]["kind"], info.kind);
                        assert_eq!(resource["responseKind"]["group"], info.group);
                        assert_eq!(resource["singularResource"], info.singular);
                        assert_eq!(resource["scope"], scope(info));
                        assert_eq!(resource["verbs"], json!(info.verbs));
                        if !info.short_names.is_empty() {
                            assert_eq!(resource["shortNames"], json!(info.short_names));
                        }
                        let subs = resource["subresources"].as_array().map_or(0, Vec::len);
                        assert_eq!(subs, info.subresources.len());
                    }
                }
            }
            assert_eq!(seen, served.len());
        }
    }

    #[tokio::test]
    async fn aggregated_matches_the_observed_server_for_shared_resources() {
        // Every resource the observed server and skiff both serve is described the same way,
        // except for subresources skiff does not serve (exec, proxy, ...).
        let observed = reference("full-aggregated-discovery.json");
        for (path, core) in [("GET /api", true), ("GET /apis", false)] {
            let ours = aggregated(&Kinds::builtin().snapshot(), core, AggregatedVersion::V2);
            for item in observed[path]["items"].as_array().unwrap() {
                let name = &item["metadata"]["name"];
                let our_item = ours["items"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|i| &i["metadata"]["name"] == name)
                    .unwrap();
                let theirs = &item["versions"][0]["resources"];
                let mine = &our_item["versions"][0]["resources"];
                for resource in theirs.as_array().unwrap() {
                    let Some(our) = mine
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|r| r["resource"] == resource["resource"])
                    else {
                        continue;
                    };
                    for field in [
                        "responseKind",
                        "scope",
                        "singularResource",
                        "verbs",
                        "shortNames",
                        "categories",
                    ] {
                        assert_eq!(
                            our[field], resource[field],
                            "{} {field}",
                            resource["resource"]
                        );
                    }
                    for sub in our["subresources"].as_array().into_iter().flatten() {
                        let their_sub = resource["subresources"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .find(|s| s["subresource"] == sub["subresource"]);
                        // The capture lists services/proxy and nodes/proxy but not pods/proxy,
                        // which kube-apiserver serves all the same (its API reference's
                        // "connect" operations); skiff lists all three alike.
                        if their_sub.is_none()
                            && resource["resource"] == "pods"
                            && sub["subresource"] == "proxy"
                        {
                            continue;
                        }
                        let their_sub = their_sub.unwrap_or_else(|| {
                            panic!("{} has no {}", resource["resource"], sub["subresource"])
                        });
                        assert_eq!(sub, their_sub);
                    }
                }
            }
        }
    }

    #[tokio::test]
    async fn v2beta1_is_answered_as_v2beta1() {
        let accept = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";
        let response = call(
            routes(Arc::new(Kinds::builtin())),
            get("/apis", &[("accept", accept)]),
        )
        .await;
        assert_eq!(
            response.headers()["content-type"],
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
        );
        assert_eq!(json(&response)["apiVersion"], "apidiscovery.k8s.io/v2beta1");
    }

    #[tokio::test]
    async fn legacy_discovery_matches_the_observed_server() {
        let observed = reference("legacy-discovery.json");
        let accept = [
            ("accept", "application/json, */*"),
            ("host", "127.0.0.1:6443"),
        ];

        let api = json(&call(routes(Arc::new(Kinds::builtin())), get("/api", &accept)).await);
        assert_eq!(api["kind"], "APIVersions");
        assert_eq!(api["versions"], json!(["v1"]));
        assert_eq!(
            api["serverAddressByClientCIDRs"],
            observed["GET /api"]["serverAddressByClientCIDRs"]
        );

        let apis = call(routes(Arc::new(Kinds::builtin())), get("/apis", &accept)).await;
        assert_eq!(apis.headers()["content-type"], "application/json");
        let apis = json(&apis);
        assert_eq!(apis["kind"], "APIGroupList");
        let apps = apis["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == "apps")
            .unwrap();
        assert_eq!(apps, &observed["GET /apis"]["groups"][0]);
        let names: Vec<&str> = apis["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "apps",
                "batch",
                "autoscaling",
                "coordination.k8s.io",
                "discovery.k8s.io",
                "events.k8s.io",
                "networking.k8s.io",
                "rbac.authorization.k8s.io",
                "storage.k8s.io",
                "policy",
                "scheduling.k8s.io",
                "node.k8s.io",
                "flowcontrol.apiserver.k8s.io",
                "authorization.k8s.io",
                "authentication.k8s.io",
                "certificates.k8s.io",
                "admissionregistration.k8s.io",
                "apiextensions.k8s.io",
                "apiregistration.k8s.io",
                // Served by an aggregated API server in Kubernetes (metrics-server), built in here.
                "metrics.k8s.io"
            ]
        );

        for (path, key) in [
            ("/api/v1", "GET /api/v1"),
            ("/apis/apps/v1", "GET /apis/apps/v1"),
        ] {
            let ours = json(&call(routes(Arc::new(Kinds::builtin())), get(path, &accept)).await);
            let theirs = &observed[key];
            assert_eq!(ours["kind"], "APIResourceList");
            assert_eq!(ours["apiVersion"], "v1");
            assert_eq!(ours["groupVersion"], theirs["groupVersion"]);
            let ours_list = ours["resources"].as_array().unwrap();
            let theirs_list = theirs["resources"].as_array().unwrap();
            // Everything both serve is described identically ...
            let mut shared = 0;
            for their in theirs_list {
                if let Some(our) = ours_list.iter().find(|r| r["name"] == their["name"]) {
                    assert_eq!(our, their, "{path}");
                    shared += 1;
                }
            }
            assert!(shared >= 6, "{path}: only {shared} shared");
            // ... and every entry of ours is a served resource or subresource.
            for our in ours_list {
                let name = our["name"].as_str().unwrap();
                let (plural, sub) = name
                    .split_once('/')
                    .map_or((name, None), |(p, s)| (p, Some(s)));
                let group = path
                    .strip_prefix("/apis/")
                    .map_or("", |gv| gv.split('/').next().unwrap());
                let kinds = Kinds::builtin().snapshot();
                let info = kinds.lookup(group, "v1", plural).unwrap().info();
                if let Some(sub) = sub {
                    assert!(info.subresource(sub).is_some(), "{name}");
                }
            }
        }
    }

    #[tokio::test]
    async fn api_group_and_unknown_paths() {
        let group = json(
            &call(
                routes(Arc::new(Kinds::builtin())),
                get("/apis/coordination.k8s.io", &[]),
            )
            .await,
        );
        assert_eq!(group["kind"], "APIGroup");
        assert_eq!(
            group["preferredVersion"]["groupVersion"],
            "coordination.k8s.io/v1"
        );

        for path in ["/apis/nope", "/apis/apps/v2", "/api/v2", "/apis/nope/v1"] {
            let response = call(routes(Arc::new(Kinds::builtin())), get(path, &[])).await;
            assert_eq!(response.status(), 404, "{path}");
            let body = json(&response);
            assert_eq!(body["kind"], "Status");
            assert_eq!(body["reason"], "NotFound");
            assert_eq!(body["code"], 404);
        }
        // Resource paths are left to the resource handlers.
        let deeper = call(routes(Arc::new(Kinds::builtin())), get("/api/v1/pods", &[])).await;
        assert_eq!(deeper.status(), 404);
        assert_eq!(deeper.body().len(), 0, "not answered by discovery");
    }
}
