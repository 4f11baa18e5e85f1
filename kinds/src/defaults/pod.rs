//! Pod defaults (`SetDefaults_PodSpec`, `SetDefaults_Container`, `SetDefaults_Probe`, volume
//! and port defaults), shared by pods and workload templates, and the pod-only ones
//! (`SetDefaults_Pod` and the Priority admission plugin's fill).

use k8s_openapi::api::core::v1::{
    Container, PodSecurityContext, PodSpec, Probe, ResourceRequirements, Volume,
};

/// Mode of files projected from ConfigMaps, Secrets and the downward API: 0644.
pub const DEFAULT_VOLUME_MODE: i32 = 0o644;

/// `SetDefaults_PodSpec` and everything below it: what every pod spec gets, in pods and in
/// templates alike.
pub fn default_pod_spec(spec: &mut PodSpec) {
    if spec.dns_policy.as_deref().unwrap_or("").is_empty() {
        spec.dns_policy = Some("ClusterFirst".into());
    }
    if spec.restart_policy.as_deref().unwrap_or("").is_empty() {
        spec.restart_policy = Some("Always".into());
    }
    if spec.host_network == Some(true) {
        for c in spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
        {
            for p in c.ports.iter_mut().flatten() {
                if p.host_port.unwrap_or(0) == 0 {
                    p.host_port = Some(p.container_port);
                }
            }
        }
    }
    if spec.security_context.is_none() {
        spec.security_context = Some(PodSecurityContext::default());
    }
    spec.termination_grace_period_seconds.get_or_insert(30);
    if spec.scheduler_name.as_deref().unwrap_or("").is_empty() {
        spec.scheduler_name = Some("default-scheduler".into());
    }
    for c in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        default_container(c);
    }
    // `SetDefaults_EphemeralContainer`: the container defaults, on the fields the two share.
    for c in spec.ephemeral_containers.iter_mut().flatten() {
        let target = c.target_container_name.take();
        let mut value = serde_json::to_value(&*c).unwrap_or_default();
        if let Ok(mut as_container) = serde_json::from_value::<Container>(value.clone()) {
            default_container(&mut as_container);
            value = serde_json::to_value(&as_container).unwrap_or(value);
            if let Ok(defaulted) = serde_json::from_value(value) {
                *c = defaulted;
            }
        }
        c.target_container_name = target;
    }
    for v in spec.volumes.iter_mut().flatten() {
        default_volume(v);
    }
}

/// `SetDefaults_Pod`: requests default to limits, service links on. (A pod's priority is the
/// API server's Priority admission plugin's business: it depends on the PriorityClasses.)
pub(super) fn default_pod_only(spec: &mut PodSpec) {
    for c in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        let resources = c
            .resources
            .get_or_insert_with(ResourceRequirements::default);
        if let Some(limits) = resources.limits.clone() {
            let requests = resources.requests.get_or_insert_with(Default::default);
            for (name, q) in limits {
                requests.entry(name).or_insert(q);
            }
        }
    }
    spec.enable_service_links.get_or_insert(true);
}

/// `Always` when the image has no tag or the `latest` tag (and no digest), else `IfNotPresent`
/// (the rule lives in `skiff-meta`, which the kubelet shares for static pods).
pub fn default_container_image_pull_policy(image: &str) -> &'static str {
    skiff_meta::images::default_pull_policy(image)
}

fn default_container(c: &mut Container) {
    if c.image_pull_policy.as_deref().unwrap_or("").is_empty() {
        c.image_pull_policy =
            Some(default_container_image_pull_policy(c.image.as_deref().unwrap_or("")).into());
    }
    if c.termination_message_path
        .as_deref()
        .unwrap_or("")
        .is_empty()
    {
        c.termination_message_path = Some("/dev/termination-log".into());
    }
    if c.termination_message_policy
        .as_deref()
        .unwrap_or("")
        .is_empty()
    {
        c.termination_message_policy = Some("File".into());
    }
    // Kubernetes always serializes the (non-pointer) resources struct.
    c.resources
        .get_or_insert_with(ResourceRequirements::default);
    for p in c.ports.iter_mut().flatten() {
        if p.protocol.as_deref().unwrap_or("").is_empty() {
            p.protocol = Some("TCP".into());
        }
    }
    for probe in [
        c.liveness_probe.as_mut(),
        c.readiness_probe.as_mut(),
        c.startup_probe.as_mut(),
    ]
    .into_iter()
    .flatten()
    {
        default_probe(probe);
    }
    if let Some(lifecycle) = c.lifecycle.as_mut() {
        for handler in [lifecycle.post_start.as_mut(), lifecycle.pre_stop.as_mut()]
            .into_iter()
            .flatten()
        {
            if let Some(http) = handler.http_get.as_mut() {
                if http.path.as_deref().unwrap_or("").is_empty() {
                    http.path = Some("/".into());
                }
                if http.scheme.as_deref().unwrap_or("").is_empty() {
                    http.scheme = Some("HTTP".into());
                }
            }
        }
    }
    for env in c.env.iter_mut().flatten() {
        if let Some(field_ref) = env.value_from.as_mut().and_then(|f| f.field_ref.as_mut())
            && field_ref.api_version.as_deref().unwrap_or("").is_empty()
        {
            field_ref.api_version = Some("v1".into());
        }
    }
}

fn default_probe(p: &mut Probe) {
    for (field, default) in [
        (&mut p.timeout_seconds, 1),
        (&mut p.period_seconds, 10),
        (&mut p.success_threshold, 1),
        (&mut p.failure_threshold, 3),
    ] {
        if field.unwrap_or(0) == 0 {
            *field = Some(default);
        }
    }
    if let Some(http) = p.http_get.as_mut() {
        if http.path.as_deref().unwrap_or("").is_empty() {
            http.path = Some("/".into());
        }
        if http.scheme.as_deref().unwrap_or("").is_empty() {
            http.scheme = Some("HTTP".into());
        }
    }
}

fn default_volume(v: &mut Volume) {
    let value = serde_json::to_value(&*v).unwrap_or_default();
    let has_source = value
        .as_object()
        .is_some_and(|m| m.iter().any(|(k, v)| k != "name" && !v.is_null()));
    if !has_source {
        v.empty_dir = Some(Default::default());
    }
    if let Some(s) = v.secret.as_mut() {
        s.default_mode.get_or_insert(DEFAULT_VOLUME_MODE);
    }
    if let Some(c) = v.config_map.as_mut() {
        c.default_mode.get_or_insert(DEFAULT_VOLUME_MODE);
    }
    if let Some(d) = v.downward_api.as_mut() {
        d.default_mode.get_or_insert(DEFAULT_VOLUME_MODE);
        for item in d.items.iter_mut().flatten() {
            if let Some(f) = item.field_ref.as_mut()
                && f.api_version.as_deref().unwrap_or("").is_empty()
            {
                f.api_version = Some("v1".into());
            }
        }
    }
    if let Some(p) = v.projected.as_mut() {
        p.default_mode.get_or_insert(DEFAULT_VOLUME_MODE);
        for src in p.sources.iter_mut().flatten() {
            if let Some(sat) = src.service_account_token.as_mut() {
                sat.expiration_seconds.get_or_insert(3600);
            }
        }
    }
    if let Some(h) = v.host_path.as_mut() {
        h.type_.get_or_insert_with(String::new);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    fn pod(spec: Value) -> Value {
        let mut obj = json!({"metadata": {"name": "p"}, "spec": spec});
        super::super::pod(&mut obj);
        obj["spec"].clone()
    }

    #[test]
    fn pod_spec_defaults() {
        let spec = pod(
            json!({"containers": [{"name": "c", "image": "nginx:1.27", "ports": [{"containerPort": 80}]}]}),
        );
        assert_eq!(
            spec,
            json!({
                "containers": [{
                    "name": "c",
                    "image": "nginx:1.27",
                    "imagePullPolicy": "IfNotPresent",
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    "resources": {},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File"
                }],
                "dnsPolicy": "ClusterFirst",
                "enableServiceLinks": true,
                "restartPolicy": "Always",
                "schedulerName": "default-scheduler",
                "securityContext": {},
                "terminationGracePeriodSeconds": 30
            })
        );
    }

    #[test]
    fn explicit_values_are_kept() {
        let spec = pod(
            json!({"restartPolicy": "Never", "dnsPolicy": "Default", "terminationGracePeriodSeconds": 0, "enableServiceLinks": false, "containers": [{"name": "c", "image": "x", "imagePullPolicy": "Never"}]}),
        );
        assert_eq!(spec["restartPolicy"], "Never");
        assert_eq!(spec["dnsPolicy"], "Default");
        assert_eq!(spec["terminationGracePeriodSeconds"], 0);
        assert_eq!(spec["enableServiceLinks"], false);
        assert_eq!(spec["containers"][0]["imagePullPolicy"], "Never");
        let spec = pod(json!({"containers": []}));
        assert!(
            spec.get("priority").is_none() && spec.get("preemptionPolicy").is_none(),
            "priority comes from admission"
        );
    }

    #[test]
    fn image_pull_policy_from_tag() {
        let cases = [
            ("nginx", "Always"),
            ("nginx:latest", "Always"),
            ("nginx:1.27", "IfNotPresent"),
            ("localhost:5000/nginx", "Always"),
            ("localhost:5000/nginx:v1", "IfNotPresent"),
            ("nginx@sha256:abcd", "IfNotPresent"),
            ("registry.io/a/b:latest", "Always"),
        ];
        for (image, want) in cases {
            assert_eq!(
                super::default_container_image_pull_policy(image),
                want,
                "{image}"
            );
        }
    }

    #[test]
    fn probes_ports_resources_volumes() {
        let spec = pod(json!({
            "containers": [{
                "name": "c", "image": "x",
                "livenessProbe": {"httpGet": {"port": 8080}},
                "readinessProbe": {"tcpSocket": {"port": 80}, "periodSeconds": 3},
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}},
                "env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
            }],
            "volumes": [
                {"name": "a"},
                {"name": "b", "configMap": {"name": "cm"}},
                {"name": "c", "secret": {"secretName": "s", "defaultMode": 256}},
                {"name": "d", "hostPath": {"path": "/tmp"}}
            ]
        }));
        let c = &spec["containers"][0];
        assert_eq!(
            c["livenessProbe"],
            json!({"httpGet": {"port": 8080, "path": "/", "scheme": "HTTP"}, "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3})
        );
        assert_eq!(c["readinessProbe"]["periodSeconds"], 3);
        assert_eq!(
            c["resources"]["requests"],
            json!({"cpu": "500m", "memory": "1Gi"})
        );
        assert_eq!(c["env"][0]["valueFrom"]["fieldRef"]["apiVersion"], "v1");
        assert_eq!(spec["volumes"][0], json!({"name": "a", "emptyDir": {}}));
        assert_eq!(spec["volumes"][1]["configMap"]["defaultMode"], 420);
        assert_eq!(spec["volumes"][2]["secret"]["defaultMode"], 256);
        assert_eq!(spec["volumes"][3]["hostPath"]["type"], "");
    }

    #[test]
    fn host_network_host_ports() {
        let spec = pod(
            json!({"hostNetwork": true, "containers": [{"name": "c", "image": "x", "ports": [{"containerPort": 8080}]}]}),
        );
        assert_eq!(spec["containers"][0]["ports"][0]["hostPort"], 8080);
    }

    #[test]
    fn defaulting_is_idempotent() {
        let once = pod(
            json!({"containers": [{"name": "c", "image": "x", "resources": {"limits": {"cpu": "1"}}}], "volumes": [{"name": "v"}]}),
        );
        let twice = pod(once.clone());
        assert_eq!(once, twice);
    }
}
