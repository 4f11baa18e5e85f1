//! Pod rules (`ValidatePodSpec`, `ValidatePodTemplateSpec`, `ValidatePodUpdate`): containers,
//! ports, env, volumes and mounts, probes, resources, tolerations, policies, and the narrow set
//! of fields a pod update may change.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use k8s_openapi::api::core::v1::{
    Affinity, Binding, Container, EnvVar, EphemeralContainer, ExecAction, HTTPGetAction, Lifecycle,
    NodeSelectorTerm, Pod, PodAffinityTerm, PodSpec, PodTemplateSpec, Probe, ResourceRequirements,
    TCPSocketAction, Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

use super::apps::validate_label_selector;
use super::meta::{validate_annotations, validate_label_name, validate_labels};
use super::{FieldError, Path};
use super::{decode, names, quantity, s};

const NEGATIVE: &str = "must be greater than or equal to 0";
const PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];
const MAX_INT32: i64 = i32::MAX as i64;

/// The fields a pod update may change, as Kubernetes lists them in its Forbidden message.
pub const UPDATABLE_POD_SPEC_FIELDS: &str = "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

pub(crate) fn validate(new: &Value, old: Option<&Value>) -> Result<Vec<FieldError>, FieldError> {
    let pod: Pod = decode(new, "")?;
    let spec = pod.spec.clone().unwrap_or_default();
    let spec_path = Path::new("spec");
    let mut errs = validate_pod_spec(&spec, &spec_path);
    if old.is_none()
        && spec
            .ephemeral_containers
            .as_ref()
            .is_some_and(|e| !e.is_empty())
    {
        errs.push(FieldError::forbidden(
            spec_path.child("ephemeralContainers"),
            "cannot be set on create",
        ));
    }
    if let Some(old) = old {
        let old: Pod = decode(old, "")?;
        errs.extend(validate_pod_update(
            &spec,
            &old.spec.unwrap_or_default(),
            &spec_path,
        ));
    }
    Ok(errs)
}

/// `ValidatePodTemplateSpec`: the template of a workload (labels at `<path>.labels`, as
/// Kubernetes reports them).
pub(crate) fn validate_pod_template(template: &PodTemplateSpec, path: &Path) -> Vec<FieldError> {
    let meta = template.metadata.clone().unwrap_or_default();
    let mut errs = validate_labels(meta.labels.as_ref(), &path.child("labels"));
    errs.extend(validate_annotations(
        meta.annotations.as_ref(),
        &path.child("annotations"),
    ));
    let spec = template.spec.clone().unwrap_or_default();
    errs.extend(validate_pod_spec(&spec, &path.child("spec")));
    if spec
        .ephemeral_containers
        .as_ref()
        .is_some_and(|e| !e.is_empty())
    {
        errs.push(FieldError::forbidden(
            path.child("spec").child("ephemeralContainers"),
            "ephemeral containers not allowed in pod template",
        ));
    }
    errs
}

fn not_supported_or_required(
    errs: &mut Vec<FieldError>,
    path: Path,
    value: &str,
    supported: &[&str],
) {
    if value.is_empty() {
        errs.push(FieldError::required(path, ""));
    } else if !supported.contains(&value) {
        errs.push(FieldError::not_supported(path, value, supported));
    }
}

/// `ValidatePodSpec`.
pub(crate) fn validate_pod_spec(spec: &PodSpec, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if spec.termination_grace_period_seconds.is_none() {
        errs.push(FieldError::required(
            path.child("terminationGracePeriodSeconds"),
            "",
        ));
    }
    let volumes = validate_volumes(
        spec.volumes.as_deref().unwrap_or_default(),
        &path.child("volumes"),
        &mut errs,
    );
    errs.extend(validate_containers(
        &spec.containers,
        &volumes,
        &path.child("containers"),
    ));
    errs.extend(validate_init_containers(
        spec.init_containers.as_deref().unwrap_or_default(),
        &spec.containers,
        &volumes,
        &path.child("initContainers"),
    ));
    errs.extend(validate_ephemeral_containers(
        spec.ephemeral_containers.as_deref().unwrap_or_default(),
        spec,
        &volumes,
        &path.child("ephemeralContainers"),
    ));
    if spec.host_network == Some(true) {
        for (ci, c) in spec.containers.iter().enumerate() {
            for (pi, p) in c.ports.iter().flatten().enumerate() {
                let hp = p.host_port.unwrap_or(0);
                if hp != p.container_port {
                    errs.push(FieldError::invalid(
                        path.child("containers")
                            .index(ci)
                            .child("ports")
                            .index(pi)
                            .child("hostPort"),
                        hp,
                        "must match `containerPort` when `hostNetwork` is true",
                    ));
                }
            }
        }
    }
    not_supported_or_required(
        &mut errs,
        path.child("restartPolicy"),
        s(&spec.restart_policy),
        &["Always", "OnFailure", "Never"],
    );
    not_supported_or_required(
        &mut errs,
        path.child("dnsPolicy"),
        s(&spec.dns_policy),
        &["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"],
    );
    if s(&spec.dns_policy) == "None" && spec.dns_config.is_none() {
        errs.push(FieldError::required(
            path.child("dnsConfig"),
            "must provide `dnsConfig` when `dnsPolicy` is None",
        ));
    }
    errs.extend(validate_labels(
        spec.node_selector.as_ref(),
        &path.child("nodeSelector"),
    ));
    if let Some(sc) = &spec.security_context {
        let p = path.child("securityContext");
        let ids = [
            ("fsGroup", sc.fs_group),
            ("runAsUser", sc.run_as_user),
            ("runAsGroup", sc.run_as_group),
        ];
        for (field, id) in ids {
            if let Some(id) = id.filter(|id| !(0..=MAX_INT32).contains(id)) {
                errs.push(FieldError::invalid(
                    p.child(field),
                    id,
                    names::inclusive_range_error(0, MAX_INT32),
                ));
            }
        }
        for (i, gid) in sc.supplemental_groups.iter().flatten().enumerate() {
            if !(0..=MAX_INT32).contains(gid) {
                errs.push(FieldError::invalid(
                    p.child("supplementalGroups").index(i),
                    *gid,
                    names::inclusive_range_error(0, MAX_INT32),
                ));
            }
        }
    }
    if spec.share_process_namespace == Some(true) && spec.host_pid == Some(true) {
        errs.push(FieldError::invalid(
            path.child("securityContext").child("shareProcessNamespace"),
            true,
            "ShareProcessNamespace and HostPID cannot both be enabled",
        ));
    }
    if let Some(affinity) = &spec.affinity {
        errs.extend(validate_affinity(affinity, &path.child("affinity")));
    }
    for field in ["serviceAccountName", "nodeName"] {
        let value = if field == "nodeName" {
            s(&spec.node_name)
        } else {
            s(&spec.service_account_name)
        };
        if !value.is_empty() {
            for msg in names::name_is_dns_subdomain(value, false) {
                errs.push(FieldError::invalid(path.child(field), value, msg));
            }
        }
    }
    if let Some(v) = spec.active_deadline_seconds
        && !(1..=MAX_INT32).contains(&v)
    {
        errs.push(FieldError::invalid(
            path.child("activeDeadlineSeconds"),
            v,
            names::inclusive_range_error(1, MAX_INT32),
        ));
    }
    for (field, value) in [("hostname", &spec.hostname), ("subdomain", &spec.subdomain)] {
        let value = s(value);
        if !value.is_empty() {
            for msg in names::dns1123_label(value) {
                errs.push(FieldError::invalid(path.child(field), value, msg));
            }
        }
    }
    if let Some(tolerations) = &spec.tolerations {
        errs.extend(validate_tolerations(
            tolerations,
            &path.child("tolerations"),
        ));
    }
    if let Some(class) = &spec.priority_class_name
        && !class.is_empty()
    {
        for msg in names::name_is_dns_subdomain(class, false) {
            errs.push(FieldError::invalid(
                path.child("priorityClassName"),
                class.as_str(),
                msg,
            ));
        }
    }
    if let Some(policy) = &spec.preemption_policy {
        not_supported_or_required(
            &mut errs,
            path.child("preemptionPolicy"),
            policy,
            &["PreemptLowerPriority", "Never"],
        );
    }
    errs
}

fn validate_dns1123_label(value: &str, path: Path) -> Vec<FieldError> {
    names::dns1123_label(value)
        .into_iter()
        .map(|msg| FieldError::invalid(path.clone(), value, msg))
        .collect()
}

/// Kubernetes' order of volume source fields, which decides which one "more than 1" names.
const VOLUME_SOURCES: &[&str] = &[
    "hostPath",
    "emptyDir",
    "gitRepo",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "flocker",
    "persistentVolumeClaim",
    "rbd",
    "quobyte",
    "cinder",
    "cephfs",
    "downwardAPI",
    "fc",
    "azureFile",
    "vsphereVolume",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "configMap",
    "storageos",
    "projected",
    "csi",
    "ephemeral",
    "image",
    "flexVolume",
];

const FILE_MODE_MSG: &str = "must be a number between 0 and 0777 (octal), both inclusive";

/// `ValidateVolumes`: returns the names of the valid volumes.
fn validate_volumes(
    volumes: &[Volume],
    path: &Path,
    errs: &mut Vec<FieldError>,
) -> BTreeSet<String> {
    let mut names_ok = BTreeSet::new();
    for (i, vol) in volumes.iter().enumerate() {
        let idx = path.index(i);
        let mut el = validate_volume_source(vol, &idx);
        let name_path = idx.child("name");
        if vol.name.is_empty() {
            el.push(FieldError::required(name_path.clone(), ""));
        } else {
            el.extend(validate_dns1123_label(&vol.name, name_path.clone()));
        }
        if names_ok.contains(&vol.name) {
            el.push(FieldError::duplicate(name_path, vol.name.as_str()));
        }
        if el.is_empty() {
            names_ok.insert(vol.name.clone());
        } else {
            errs.extend(el);
        }
    }
    names_ok
}

fn validate_volume_source(vol: &Volume, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let value = serde_json::to_value(vol).unwrap_or(Value::Null);
    let mut count = 0;
    for key in VOLUME_SOURCES {
        if value.get(key).is_some_and(|v| !v.is_null()) {
            if count > 0 {
                errs.push(FieldError::forbidden(
                    path.child(key),
                    "may not specify more than 1 volume type",
                ));
            } else {
                count += 1;
            }
        }
    }
    if count == 0 {
        errs.push(FieldError::required(
            path.clone(),
            "must specify a volume type",
        ));
        return errs;
    }
    let mode_ok = |m: i32| (0..=0o777).contains(&m);
    if let Some(secret) = &vol.secret {
        let p = path.child("secret");
        if s(&secret.secret_name).is_empty() {
            errs.push(FieldError::required(p.child("secretName"), ""));
        }
        if let Some(m) = secret.default_mode.filter(|m| !mode_ok(*m)) {
            errs.push(FieldError::invalid(
                p.child("defaultMode"),
                m,
                FILE_MODE_MSG,
            ));
        }
    }
    if let Some(cm) = &vol.config_map {
        let p = path.child("configMap");
        if cm.name.is_empty() {
            errs.push(FieldError::required(p.child("name"), ""));
        }
        if let Some(m) = cm.default_mode.filter(|m| !mode_ok(*m)) {
            errs.push(FieldError::invalid(
                p.child("defaultMode"),
                m,
                FILE_MODE_MSG,
            ));
        }
    }
    if let Some(hp) = &vol.host_path
        && hp.path.is_empty()
    {
        errs.push(FieldError::required(
            path.child("hostPath").child("path"),
            "",
        ));
    }
    if let Some(pvc) = &vol.persistent_volume_claim
        && pvc.claim_name.is_empty()
    {
        errs.push(FieldError::required(
            path.child("persistentVolumeClaim").child("claimName"),
            "",
        ));
    }
    if let Some(ed) = &vol.empty_dir
        && let Some(limit) = &ed.size_limit
        && let Ok(q) = quantity::parse_k8s(limit)
        && q.is_negative()
    {
        errs.push(FieldError::invalid(
            path.child("emptyDir").child("sizeLimit"),
            q.to_string(),
            NEGATIVE,
        ));
    }
    errs
}

fn validate_containers(
    containers: &[Container],
    volumes: &BTreeSet<String>,
    path: &Path,
) -> Vec<FieldError> {
    if containers.is_empty() {
        return vec![FieldError::required(path.clone(), "")];
    }
    let mut errs = Vec::new();
    let mut seen = HashSet::new();
    for (i, c) in containers.iter().enumerate() {
        let idx = path.index(i);
        errs.extend(validate_container_common(c, volumes, &idx));
        if !seen.insert(c.name.as_str()) {
            errs.push(FieldError::duplicate(idx.child("name"), c.name.as_str()));
        }
        if let Some(lifecycle) = &c.lifecycle {
            errs.extend(validate_lifecycle(lifecycle, &idx.child("lifecycle")));
        }
        errs.extend(validate_probe_kind(
            c.liveness_probe.as_ref(),
            &idx.child("livenessProbe"),
            ProbeKind::Liveness,
        ));
        errs.extend(validate_probe_kind(
            c.readiness_probe.as_ref(),
            &idx.child("readinessProbe"),
            ProbeKind::Readiness,
        ));
        errs.extend(validate_probe_kind(
            c.startup_probe.as_ref(),
            &idx.child("startupProbe"),
            ProbeKind::Startup,
        ));
        if c.restart_policy.is_some() {
            errs.push(FieldError::forbidden(
                idx.child("restartPolicy"),
                "may not be set for non-init containers",
            ));
        }
    }
    errs.extend(unique_host_ports(containers, path));
    errs
}

fn validate_init_containers(
    init: &[Container],
    regular: &[Container],
    volumes: &BTreeSet<String>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut seen: HashSet<&str> = regular.iter().map(|c| c.name.as_str()).collect();
    for (i, c) in init.iter().enumerate() {
        let idx = path.index(i);
        errs.extend(validate_container_common(c, volumes, &idx));
        if !seen.insert(c.name.as_str()) {
            errs.push(FieldError::duplicate(idx.child("name"), c.name.as_str()));
        }
        let sidecar = c.restart_policy.as_deref() == Some("Always");
        if let Some(policy) = c.restart_policy.as_deref()
            && policy != "Always"
        {
            errs.push(FieldError::not_supported(
                idx.child("restartPolicy"),
                policy,
                &["Always"],
            ));
        }
        if sidecar {
            errs.extend(validate_probe_kind(
                c.liveness_probe.as_ref(),
                &idx.child("livenessProbe"),
                ProbeKind::Liveness,
            ));
            errs.extend(validate_probe_kind(
                c.readiness_probe.as_ref(),
                &idx.child("readinessProbe"),
                ProbeKind::Readiness,
            ));
            errs.extend(validate_probe_kind(
                c.startup_probe.as_ref(),
                &idx.child("startupProbe"),
                ProbeKind::Startup,
            ));
        } else {
            for (field, set) in [
                ("lifecycle", c.lifecycle.is_some()),
                ("livenessProbe", c.liveness_probe.is_some()),
                ("readinessProbe", c.readiness_probe.is_some()),
                ("startupProbe", c.startup_probe.is_some()),
            ] {
                if set {
                    errs.push(FieldError::forbidden(
                        idx.child(field),
                        "may not be set for init containers without restartPolicy=Always",
                    ));
                }
            }
        }
    }
    errs
}

/// `validateEphemeralContainers`: the common container rules, a name unique among all the pod's
/// containers, a target that is one of its (non-ephemeral) containers, and none of the fields
/// an ephemeral container may not have (ports, probes, lifecycle, resources, restartPolicy,
/// subPath mounts).
fn validate_ephemeral_containers(
    ephemeral: &[EphemeralContainer],
    spec: &PodSpec,
    volumes: &BTreeSet<String>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let others: HashSet<&str> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .map(|c| c.name.as_str())
        .collect();
    let mut all = others.clone();
    for (i, ec) in ephemeral.iter().enumerate() {
        let idx = path.index(i);
        let c = ephemeral_as_container(ec);
        errs.extend(validate_container_common(&c, volumes, &idx));
        if !all.insert(ec.name.as_str()) {
            errs.push(FieldError::duplicate(idx.child("name"), ec.name.as_str()));
        }
        if let Some(target) = ec.target_container_name.as_deref()
            && !target.is_empty()
            && !others.contains(target)
        {
            errs.push(FieldError::not_found(
                idx.child("targetContainerName"),
                target,
            ));
        }
        let not_allowed = [
            ("ports", ec.ports.as_ref().is_some_and(|p| !p.is_empty())),
            (
                "resources",
                ec.resources
                    .as_ref()
                    .is_some_and(|r| r != &ResourceRequirements::default()),
            ),
            (
                "resizePolicy",
                ec.resize_policy.as_ref().is_some_and(|r| !r.is_empty()),
            ),
            ("livenessProbe", ec.liveness_probe.is_some()),
            ("readinessProbe", ec.readiness_probe.is_some()),
            ("startupProbe", ec.startup_probe.is_some()),
            ("lifecycle", ec.lifecycle.is_some()),
        ];
        for (field, set) in not_allowed {
            if set {
                errs.push(FieldError::forbidden(
                    idx.child(field),
                    "cannot be set for an Ephemeral Container",
                ));
            }
        }
        for (mi, m) in ec.volume_mounts.iter().flatten().enumerate() {
            for (field, value) in [("subPath", &m.sub_path), ("subPathExpr", &m.sub_path_expr)] {
                if !s(value).is_empty() {
                    errs.push(FieldError::forbidden(
                        idx.child("volumeMounts").index(mi).child(field),
                        "cannot be set for an Ephemeral Container",
                    ));
                }
            }
        }
        if ec.restart_policy.is_some() {
            errs.push(FieldError::forbidden(
                idx.child("restartPolicy"),
                "cannot be set for an Ephemeral Container",
            ));
        }
    }
    errs
}

/// An ephemeral container as the container it shares its fields with (the target aside).
pub(crate) fn ephemeral_as_container(ec: &EphemeralContainer) -> Container {
    let mut value = serde_json::to_value(ec).unwrap_or(Value::Null);
    if let Some(map) = value.as_object_mut() {
        map.remove("targetContainerName");
    }
    serde_json::from_value(value).unwrap_or_default()
}

/// `ValidatePodEphemeralContainersUpdate`: a write through `pods/ephemeralcontainers` (the
/// strategy has taken everything but `spec.ephemeralContainers` from the stored pod). The pod
/// is checked as a whole; existing ephemeral containers may be neither removed nor changed.
pub(crate) fn validate_ephemeral_containers_update(
    new: &Value,
    old: &Value,
) -> Result<Vec<FieldError>, FieldError> {
    let pod: Pod = decode(new, "")?;
    let old: Pod = decode(old, "")?;
    let spec = pod.spec.unwrap_or_default();
    let spec_path = Path::new("spec");
    let mut errs = validate_pod_spec(&spec, &spec_path);
    let is_mirror = old
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    if is_mirror {
        return Ok(vec![FieldError::forbidden(
            "",
            "static pods do not support ephemeral containers",
        )]);
    }
    let path = spec_path.child("ephemeralContainers");
    let new_list = spec.ephemeral_containers.unwrap_or_default();
    let old_spec = old.spec.unwrap_or_default();
    for o in old_spec.ephemeral_containers.iter().flatten() {
        match new_list.iter().find(|n| n.name == o.name) {
            None => errs.push(FieldError::forbidden(
                path.clone(),
                format!(
                    "existing ephemeral containers {:?} may not be removed\n",
                    o.name
                ),
            )),
            Some(n) if n != o => {
                let mut diff = Vec::new();
                json_diff(
                    &o.name,
                    &serde_json::to_value(o).unwrap_or(Value::Null),
                    &serde_json::to_value(n).unwrap_or(Value::Null),
                    &mut diff,
                );
                errs.push(FieldError::forbidden(
                    path.clone(),
                    format!(
                        "existing ephemeral containers {:?} may not be changed\n{}",
                        o.name,
                        diff.join("\n")
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(errs)
}

fn validate_container_common(
    c: &Container,
    volumes: &BTreeSet<String>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if c.name.is_empty() {
        errs.push(FieldError::required(path.child("name"), ""));
    } else {
        errs.extend(validate_dns1123_label(&c.name, path.child("name")));
    }
    if s(&c.image).is_empty() {
        errs.push(FieldError::required(path.child("image"), ""));
    }
    not_supported_or_required(
        &mut errs,
        path.child("terminationMessagePolicy"),
        s(&c.termination_message_policy),
        &["File", "FallbackToLogsOnError"],
    );
    errs.extend(validate_container_ports(
        c.ports.as_deref().unwrap_or_default(),
        &path.child("ports"),
    ));
    errs.extend(validate_env(
        c.env.as_deref().unwrap_or_default(),
        &path.child("env"),
    ));
    errs.extend(validate_volume_mounts(
        c.volume_mounts.as_deref().unwrap_or_default(),
        volumes,
        &path.child("volumeMounts"),
    ));
    not_supported_or_required(
        &mut errs,
        path.child("imagePullPolicy"),
        s(&c.image_pull_policy),
        &["Always", "IfNotPresent", "Never"],
    );
    if let Some(r) = &c.resources {
        errs.extend(validate_resource_requirements(r, &path.child("resources")));
    }
    if let Some(sc) = &c.security_context {
        let p = path.child("securityContext");
        for (field, id) in [
            ("runAsUser", sc.run_as_user),
            ("runAsGroup", sc.run_as_group),
        ] {
            if let Some(id) = id.filter(|id| !(0..=MAX_INT32).contains(id)) {
                errs.push(FieldError::invalid(
                    p.child(field),
                    id,
                    names::inclusive_range_error(0, MAX_INT32),
                ));
            }
        }
        if sc.allow_privilege_escalation == Some(false) {
            let sc_value = serde_json::to_value(sc).unwrap_or(Value::Null);
            if sc.privileged == Some(true) {
                errs.push(FieldError::invalid(
                    p.clone(),
                    sc_value.clone(),
                    "cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
                ));
            }
            let adds_sys_admin = sc
                .capabilities
                .as_ref()
                .and_then(|c| c.add.as_ref())
                .is_some_and(|add| add.iter().any(|c| c == "CAP_SYS_ADMIN"));
            if adds_sys_admin {
                errs.push(FieldError::invalid(
                    p,
                    sc_value,
                    "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN",
                ));
            }
        }
    }
    errs
}

fn validate_container_ports(
    ports: &[k8s_openapi::api::core::v1::ContainerPort],
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut seen = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        let idx = path.index(i);
        let name = s(&p.name);
        if !name.is_empty() {
            let msgs = names::port_name(name);
            if !msgs.is_empty() {
                for msg in msgs {
                    errs.push(FieldError::invalid(idx.child("name"), name, msg));
                }
            } else if !seen.insert(name) {
                errs.push(FieldError::duplicate(idx.child("name"), name));
            }
        }
        if p.container_port == 0 {
            errs.push(FieldError::required(idx.child("containerPort"), ""));
        } else {
            for msg in names::port_num(i64::from(p.container_port)) {
                errs.push(FieldError::invalid(
                    idx.child("containerPort"),
                    p.container_port,
                    msg,
                ));
            }
        }
        if let Some(hp) = p.host_port.filter(|hp| *hp != 0) {
            for msg in names::port_num(i64::from(hp)) {
                errs.push(FieldError::invalid(idx.child("hostPort"), hp, msg));
            }
        }
        not_supported_or_required(&mut errs, idx.child("protocol"), s(&p.protocol), PROTOCOLS);
    }
    errs
}

/// Host ports may be used once per (port, protocol, host IP) across a pod's containers.
fn unique_host_ports(containers: &[Container], path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut seen = HashSet::new();
    for (ci, c) in containers.iter().enumerate() {
        for (pi, p) in c.ports.iter().flatten().enumerate() {
            let Some(hp) = p.host_port.filter(|hp| *hp != 0) else {
                continue;
            };
            let key = format!("{}/{}/{}", s(&p.host_ip), hp, s(&p.protocol));
            if !seen.insert(key.clone()) {
                errs.push(FieldError::duplicate(
                    path.index(ci).child("ports").index(pi).child("hostPort"),
                    key,
                ));
            }
        }
    }
    errs
}

const RELAXED_ENV_MSG: &str = "a valid environment variable name must consist only of printable ASCII characters other than '='";

/// `ValidateEnv` with Kubernetes 1.33's default relaxed name rule (printable ASCII but `=`).
fn validate_env(vars: &[EnvVar], path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, ev) in vars.iter().enumerate() {
        let idx = path.index(i);
        if ev.name.is_empty() {
            errs.push(FieldError::required(idx.child("name"), ""));
            errs.push(FieldError::invalid(
                idx.child("name"),
                "",
                "environment variable name must be non-empty",
            ));
        } else if ev
            .name
            .chars()
            .any(|c| !(' '..='~').contains(&c) || c == '=')
        {
            errs.push(FieldError::invalid(
                idx.child("name"),
                ev.name.as_str(),
                RELAXED_ENV_MSG,
            ));
        }
        let Some(from) = &ev.value_from else {
            continue;
        };
        let vf = idx.child("valueFrom");
        let sources = [
            from.field_ref.is_some(),
            from.resource_field_ref.is_some(),
            from.config_map_key_ref.is_some(),
            from.secret_key_ref.is_some(),
        ]
        .iter()
        .filter(|b| **b)
        .count();
        if sources == 0 {
            errs.push(FieldError::invalid(
                vf.clone(),
                "",
                "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
            ));
        } else if !s(&ev.value).is_empty() {
            errs.push(FieldError::invalid(
                vf.clone(),
                "",
                "may not be specified when `value` is not empty",
            ));
        } else if sources > 1 {
            errs.push(FieldError::invalid(
                vf.clone(),
                "",
                "may not have more than one field specified at a time",
            ));
        }
        let key_ref = |errs: &mut Vec<FieldError>, p: Path, name: &str, key: &str| {
            if name.is_empty() {
                errs.push(FieldError::required(p.child("name"), ""));
            }
            if key.is_empty() {
                errs.push(FieldError::required(p.child("key"), ""));
            } else {
                for msg in names::config_map_key(key) {
                    errs.push(FieldError::invalid(p.child("key"), key, msg));
                }
            }
        };
        if let Some(r) = &from.config_map_key_ref {
            key_ref(&mut errs, vf.child("configMapKeyRef"), &r.name, &r.key);
        }
        if let Some(r) = &from.secret_key_ref {
            key_ref(&mut errs, vf.child("secretKeyRef"), &r.name, &r.key);
        }
        if let Some(r) = &from.field_ref
            && r.field_path.is_empty()
        {
            errs.push(FieldError::required(
                vf.child("fieldRef").child("fieldPath"),
                "",
            ));
        }
        if let Some(r) = &from.resource_field_ref
            && r.resource.is_empty()
        {
            errs.push(FieldError::required(
                vf.child("resourceFieldRef").child("resource"),
                "",
            ));
        }
    }
    errs
}

fn validate_local_descending_path(value: &str, path: Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if value.starts_with('/') {
        errs.push(FieldError::invalid(
            path.clone(),
            value,
            "must be a relative path",
        ));
    }
    if value.split('/').any(|seg| seg == "..") {
        errs.push(FieldError::invalid(path, value, "must not contain '..'"));
    }
    errs
}

fn validate_volume_mounts(
    mounts: &[VolumeMount],
    volumes: &BTreeSet<String>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut points = HashSet::new();
    for (i, m) in mounts.iter().enumerate() {
        let idx = path.index(i);
        if m.name.is_empty() {
            errs.push(FieldError::required(idx.child("name"), ""));
        }
        if !volumes.contains(&m.name) {
            errs.push(FieldError::not_found(idx.child("name"), m.name.as_str()));
        }
        if m.mount_path.is_empty() {
            errs.push(FieldError::required(idx.child("mountPath"), ""));
        }
        if !points.insert(m.mount_path.as_str()) {
            errs.push(FieldError::invalid(
                idx.child("mountPath"),
                m.mount_path.as_str(),
                "must be unique",
            ));
        }
        let sub_path = s(&m.sub_path);
        if !sub_path.is_empty() {
            errs.extend(validate_local_descending_path(
                sub_path,
                path.child("subPath"),
            ));
        }
        let expr = s(&m.sub_path_expr);
        if !expr.is_empty() {
            if !sub_path.is_empty() {
                errs.push(FieldError::invalid(
                    idx.child("subPathExpr"),
                    expr,
                    "subPathExpr and subPath are mutually exclusive",
                ));
            }
            errs.extend(validate_local_descending_path(
                expr,
                path.child("subPathExpr"),
            ));
        }
        if let Some(p) = m.mount_propagation.as_deref()
            && !["None", "HostToContainer", "Bidirectional"].contains(&p)
        {
            errs.push(FieldError::not_supported(
                path.child("mountPropagation"),
                p,
                &["Bidirectional", "HostToContainer", "None"],
            ));
        }
    }
    errs
}

#[derive(Clone, Copy, PartialEq)]
enum ProbeKind {
    Liveness,
    Readiness,
    Startup,
}

fn validate_probe_kind(probe: Option<&Probe>, path: &Path, kind: ProbeKind) -> Vec<FieldError> {
    let Some(probe) = probe else {
        return Vec::new();
    };
    let mut errs = validate_probe(probe, path);
    match kind {
        ProbeKind::Liveness | ProbeKind::Startup => {
            let st = probe.success_threshold.unwrap_or(0);
            if st != 1 {
                errs.push(FieldError::invalid(
                    path.child("successThreshold"),
                    st,
                    "must be 1",
                ));
            }
        }
        ProbeKind::Readiness => {
            if let Some(t) = probe.termination_grace_period_seconds {
                errs.push(FieldError::invalid(
                    path.child("terminationGracePeriodSeconds"),
                    t,
                    "must not be set for readinessProbes",
                ));
            }
        }
    }
    errs
}

fn validate_port_num_or_name(port: &IntOrString, path: Path) -> Vec<FieldError> {
    match port {
        IntOrString::Int(n) => names::port_num(i64::from(*n))
            .into_iter()
            .map(|msg| FieldError::invalid(path.clone(), *n, msg))
            .collect(),
        IntOrString::String(name) => names::port_name(name)
            .into_iter()
            .map(|msg| FieldError::invalid(path.clone(), name.as_str(), msg))
            .collect(),
    }
}

/// `validateHandler`: exactly one of the handler kinds, each well formed.
fn validate_handler(
    path: &Path,
    exec: Option<&ExecAction>,
    http_get: Option<&HTTPGetAction>,
    tcp_socket: Option<&TCPSocketAction>,
    grpc_port: Option<i32>,
    sleep: bool,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut handlers = 0;
    let mut take = |errs: &mut Vec<FieldError>, name: &str, set: bool| -> bool {
        if !set {
            return false;
        }
        if handlers > 0 {
            errs.push(FieldError::forbidden(
                path.child(name),
                "may not specify more than 1 handler type",
            ));
            false
        } else {
            handlers += 1;
            true
        }
    };
    if take(&mut errs, "exec", exec.is_some())
        && exec.is_some_and(|e| e.command.as_ref().is_none_or(Vec::is_empty))
    {
        errs.push(FieldError::required(
            path.child("exec").child("command"),
            "",
        ));
    }
    if let Some(http) = http_get.filter(|_| take(&mut errs, "httpGet", true)) {
        let p = path.child("httpGet");
        if s(&http.path).is_empty() {
            errs.push(FieldError::required(p.child("path"), ""));
        }
        errs.extend(validate_port_num_or_name(&http.port, p.child("port")));
        let scheme = s(&http.scheme);
        if scheme != "HTTP" && scheme != "HTTPS" {
            errs.push(FieldError::not_supported(
                p.child("scheme"),
                scheme,
                &["HTTP", "HTTPS"],
            ));
        }
        for h in http.http_headers.iter().flatten() {
            for msg in names::http_header_name(&h.name) {
                errs.push(FieldError::invalid(
                    p.child("httpHeaders"),
                    h.name.as_str(),
                    msg,
                ));
            }
        }
    }
    if let Some(tcp) = tcp_socket.filter(|_| take(&mut errs, "tcpSocket", true)) {
        errs.extend(validate_port_num_or_name(
            &tcp.port,
            path.child("tcpSocket").child("port"),
        ));
    }
    if let Some(port) = grpc_port.filter(|_| take(&mut errs, "grpc", true)) {
        for msg in names::port_num(i64::from(port)) {
            errs.push(FieldError::invalid(
                path.child("grpc").child("port"),
                port,
                msg,
            ));
        }
    }
    take(&mut errs, "sleep", sleep);
    if handlers == 0 {
        errs.push(FieldError::required(
            path.clone(),
            "must specify a handler type",
        ));
    }
    errs
}

fn validate_lifecycle(lifecycle: &Lifecycle, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (name, handler) in [
        ("postStart", &lifecycle.post_start),
        ("preStop", &lifecycle.pre_stop),
    ] {
        if let Some(h) = handler {
            errs.extend(validate_handler(
                &path.child(name),
                h.exec.as_ref(),
                h.http_get.as_ref(),
                h.tcp_socket.as_ref(),
                None,
                h.sleep.is_some(),
            ));
        }
    }
    errs
}

/// `validateProbe`: exactly one handler, non-negative timings.
fn validate_probe(probe: &Probe, path: &Path) -> Vec<FieldError> {
    let mut errs = validate_handler(
        path,
        probe.exec.as_ref(),
        probe.http_get.as_ref(),
        probe.tcp_socket.as_ref(),
        probe.grpc.as_ref().map(|g| g.port),
        false,
    );
    for (field, v) in [
        ("initialDelaySeconds", probe.initial_delay_seconds),
        ("timeoutSeconds", probe.timeout_seconds),
        ("periodSeconds", probe.period_seconds),
        ("successThreshold", probe.success_threshold),
        ("failureThreshold", probe.failure_threshold),
    ] {
        let v = v.unwrap_or(0);
        if v < 0 {
            errs.push(FieldError::invalid(path.child(field), v, NEGATIVE));
        }
    }
    if let Some(t) = probe.termination_grace_period_seconds.filter(|t| *t <= 0) {
        errs.push(FieldError::invalid(
            path.child("terminationGracePeriodSeconds"),
            t,
            "must be greater than 0",
        ));
    }
    errs
}

fn is_native_resource(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

fn is_huge_pages(name: &str) -> bool {
    name.starts_with("hugepages-")
}

fn overcommit_allowed(name: &str) -> bool {
    is_native_resource(name) && !is_huge_pages(name)
}

fn validate_container_resource_name(name: &str, path: &Path) -> Vec<FieldError> {
    let mut errs: Vec<FieldError> = names::qualified_name(name)
        .into_iter()
        .map(|msg| FieldError::invalid(path.clone(), name, msg))
        .collect();
    if !name.contains('/') {
        let standard =
            matches!(name, "cpu" | "memory" | "ephemeral-storage") || is_huge_pages(name);
        if !standard {
            errs.push(FieldError::invalid(
                path.clone(),
                name,
                "must be a standard resource for containers",
            ));
        }
    } else if !is_native_resource(name)
        && (name.starts_with("requests.")
            || !names::qualified_name(&format!("requests.{name}")).is_empty())
    {
        errs.push(FieldError::invalid(
            path.clone(),
            name,
            "doesn't follow extended resource name standard",
        ));
    }
    errs
}

/// Parses every quantity of a resource list, reporting malformed and negative ones.
fn parsed_resources(
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    path: &Path,
    errs: &mut Vec<FieldError>,
) -> BTreeMap<String, quantity::Quantity> {
    let mut out = BTreeMap::new();
    for (name, q) in list.into_iter().flatten() {
        let p = path.key(name);
        errs.extend(validate_container_resource_name(name, &p));
        match quantity::parse_k8s(q) {
            Err(e) => errs.push(FieldError::invalid(p, q.0.as_str(), e.to_string())),
            Ok(parsed) => {
                if parsed.is_negative() {
                    errs.push(FieldError::invalid(p.clone(), parsed.to_string(), NEGATIVE));
                }
                if !is_native_resource(name) && !parsed.is_integer() {
                    errs.push(FieldError::invalid(
                        p,
                        parsed.to_string(),
                        "must be an integer",
                    ));
                }
                out.insert(name.clone(), parsed);
            }
        }
    }
    out
}

/// `ValidateResourceRequirements`: quantities parse and are non-negative, requests stay within
/// limits (and equal them for extended resources and hugepages).
pub(crate) fn validate_resource_requirements(
    r: &ResourceRequirements,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let lim_path = path.child("limits");
    let req_path = path.child("requests");
    let limits = parsed_resources(r.limits.as_ref(), &lim_path, &mut errs);
    let requests = parsed_resources(r.requests.as_ref(), &req_path, &mut errs);
    for (name, req) in &requests {
        match limits.get(name) {
            Some(lim) => {
                if req != lim && !overcommit_allowed(name) {
                    errs.push(FieldError::invalid(
                        req_path.clone(),
                        req.to_string(),
                        format!("must be equal to {name} limit of {lim}"),
                    ));
                } else if req > lim {
                    errs.push(FieldError::invalid(
                        req_path.clone(),
                        req.to_string(),
                        format!("must be less than or equal to {name} limit of {lim}"),
                    ));
                }
            }
            None if !overcommit_allowed(name) => errs.push(FieldError::required(
                lim_path.clone(),
                "Limit must be set for non overcommitable resources",
            )),
            None => {}
        }
    }
    errs
}

fn validate_node_selector_term(term: &NodeSelectorTerm, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, rq) in term.match_expressions.iter().flatten().enumerate() {
        let p = path.child("matchExpressions").index(i);
        let values = rq.values.as_deref().unwrap_or_default();
        match rq.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => errs.push(FieldError::required(
                p.child("values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => errs.push(FieldError::forbidden(
                p.child("values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "Gt" | "Lt" if values.len() != 1 => errs.push(FieldError::required(
                p.child("values"),
                "must be specified single value when `operator` is 'Lt' or 'Gt'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" | "Gt" | "Lt" => {}
            other => errs.push(FieldError::invalid(
                p.child("operator"),
                other,
                "not a valid selector operator",
            )),
        }
        errs.extend(validate_label_name(&rq.key, &p.child("key")));
        for (vi, v) in values.iter().enumerate() {
            for msg in names::label_value(v) {
                errs.push(FieldError::invalid(
                    p.child("values").index(vi),
                    v.as_str(),
                    msg,
                ));
            }
        }
    }
    for (i, rq) in term.match_fields.iter().flatten().enumerate() {
        let p = path.child("matchFields").index(i);
        let values = rq.values.as_deref().unwrap_or_default();
        match rq.operator.as_str() {
            "In" | "NotIn" => {
                if values.len() != 1 {
                    errs.push(FieldError::required(
                        p.child("values"),
                        "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
                    ));
                }
            }
            other => errs.push(FieldError::invalid(
                p.child("operator"),
                other,
                "not a valid selector operator",
            )),
        }
        if rq.key != "metadata.name" {
            errs.push(FieldError::invalid(
                p.child("key"),
                rq.key.as_str(),
                "not a valid field selector key",
            ));
        } else {
            for (vi, v) in values.iter().enumerate() {
                for msg in names::name_is_dns_subdomain(v, false) {
                    errs.push(FieldError::invalid(
                        p.child("values").index(vi),
                        v.as_str(),
                        msg,
                    ));
                }
            }
        }
    }
    errs
}

fn validate_pod_affinity_term(term: &PodAffinityTerm, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(sel) = &term.label_selector {
        errs.extend(validate_label_selector(sel, &path.child("labelSelector")));
    }
    if let Some(sel) = &term.namespace_selector {
        errs.extend(validate_label_selector(
            sel,
            &path.child("namespaceSelector"),
        ));
    }
    for ns in term.namespaces.iter().flatten() {
        for msg in names::dns1123_label(ns) {
            errs.push(FieldError::invalid(
                path.child("namespace"),
                ns.as_str(),
                msg,
            ));
        }
    }
    if term.topology_key.is_empty() {
        errs.push(FieldError::required(
            path.child("topologyKey"),
            "can not be empty",
        ));
    }
    errs.extend(validate_label_name(
        &term.topology_key,
        &path.child("topologyKey"),
    ));
    errs
}

fn validate_weight(weight: i32, path: Path) -> Option<FieldError> {
    (!(1..=100).contains(&weight))
        .then(|| FieldError::invalid(path, weight, "must be in the range 1-100"))
}

/// `validateAffinity`: node selector terms and pod (anti-)affinity terms well formed.
fn validate_affinity(affinity: &Affinity, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(na) = &affinity.node_affinity {
        let p = path.child("nodeAffinity");
        if let Some(required) = &na.required_during_scheduling_ignored_during_execution {
            let terms = p
                .child("requiredDuringSchedulingIgnoredDuringExecution")
                .child("nodeSelectorTerms");
            if required.node_selector_terms.is_empty() {
                errs.push(FieldError::required(
                    terms,
                    "must have at least one node selector term",
                ));
            } else {
                for (i, term) in required.node_selector_terms.iter().enumerate() {
                    errs.extend(validate_node_selector_term(term, &terms.index(i)));
                }
            }
        }
        let preferred = p.child("preferredDuringSchedulingIgnoredDuringExecution");
        for (i, term) in na
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
            .enumerate()
        {
            errs.extend(validate_weight(
                term.weight,
                preferred.index(i).child("weight"),
            ));
            errs.extend(validate_node_selector_term(
                &term.preference,
                &preferred.index(i).child("preference"),
            ));
        }
    }
    let pod_terms = [
        (
            "podAffinity",
            affinity.pod_affinity.as_ref().map(|a| {
                (
                    a.required_during_scheduling_ignored_during_execution
                        .clone(),
                    a.preferred_during_scheduling_ignored_during_execution
                        .clone(),
                )
            }),
        ),
        (
            "podAntiAffinity",
            affinity.pod_anti_affinity.as_ref().map(|a| {
                (
                    a.required_during_scheduling_ignored_during_execution
                        .clone(),
                    a.preferred_during_scheduling_ignored_during_execution
                        .clone(),
                )
            }),
        ),
    ];
    for (name, terms) in pod_terms {
        let Some((required, preferred)) = terms else {
            continue;
        };
        let p = path.child(name);
        let req_path = p.child("requiredDuringSchedulingIgnoredDuringExecution");
        for (i, term) in required.iter().flatten().enumerate() {
            errs.extend(validate_pod_affinity_term(term, &req_path.index(i)));
        }
        let pref_path = p.child("preferredDuringSchedulingIgnoredDuringExecution");
        for (i, term) in preferred.iter().flatten().enumerate() {
            errs.extend(validate_weight(
                term.weight,
                pref_path.index(i).child("weight"),
            ));
            errs.extend(validate_pod_affinity_term(
                &term.pod_affinity_term,
                &pref_path.index(i).child("podAffinityTerm"),
            ));
        }
    }
    errs
}

/// `ValidateTolerations`.
pub(crate) fn validate_tolerations(tolerations: &[Toleration], path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, t) in tolerations.iter().enumerate() {
        let idx = path.index(i);
        let key = s(&t.key);
        let op = s(&t.operator);
        let effect = s(&t.effect);
        if !key.is_empty() {
            errs.extend(validate_label_name(key, &idx.child("key")));
        }
        if key.is_empty() && op != "Exists" {
            errs.push(FieldError::invalid(
                idx.child("operator"),
                op,
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ));
        }
        if t.toleration_seconds.is_some() && effect != "NoExecute" {
            errs.push(FieldError::invalid(
                idx.child("effect"),
                effect,
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        match op {
            "Equal" | "" => {
                let msgs = names::label_value(s(&t.value));
                if !msgs.is_empty() {
                    errs.push(FieldError::invalid(
                        idx.child("operator"),
                        s(&t.value),
                        msgs.join(";"),
                    ));
                }
            }
            "Exists" => {
                if !s(&t.value).is_empty() {
                    errs.push(FieldError::invalid(
                        idx.child("operator"),
                        serde_json::to_value(t).unwrap_or(Value::Null),
                        "value must be empty when `operator` is 'Exists'",
                    ));
                }
            }
            other => errs.push(FieldError::not_supported(
                idx.child("operator"),
                other,
                &["Equal", "Exists"],
            )),
        }
        if !effect.is_empty() {
            errs.extend(validate_taint_effect(effect, true, idx.child("effect")));
        }
    }
    errs
}

/// `validateTaintEffect`.
pub(crate) fn validate_taint_effect(
    effect: &str,
    allow_empty: bool,
    path: Path,
) -> Vec<FieldError> {
    if !allow_empty && effect.is_empty() {
        return vec![FieldError::required(path, "")];
    }
    match effect {
        "NoSchedule" | "PreferNoSchedule" | "NoExecute" => Vec::new(),
        other => vec![FieldError::not_supported(
            path,
            other,
            &["NoSchedule", "PreferNoSchedule", "NoExecute"],
        )],
    }
}

/// `ValidatePodUpdate`'s spec rules: only images, activeDeadlineSeconds (downwards), added
/// tolerations and a negative grace period turned to 1 may change.
fn validate_pod_update(new: &PodSpec, old: &PodSpec, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if new.containers.len() != old.containers.len() {
        errs.push(FieldError::forbidden(
            path.child("containers"),
            "pod updates may not add or remove containers",
        ));
        return errs;
    }
    for (i, c) in new.containers.iter().enumerate() {
        let image = s(&c.image);
        if image.is_empty() {
            errs.push(FieldError::required(
                path.child("containers").index(i).child("image"),
                "",
            ));
        }
        if image.trim() != image {
            errs.push(FieldError::invalid(
                path.child("containers").index(i).child("image"),
                image,
                "must not have leading or trailing whitespace",
            ));
        }
    }
    let new_init = new.init_containers.as_deref().unwrap_or_default();
    let old_init = old.init_containers.as_deref().unwrap_or_default();
    if new_init.len() != old_init.len() {
        errs.push(FieldError::forbidden(
            path.child("initContainers"),
            "pod updates may not add or remove containers",
        ));
        return errs;
    }
    if let Some(new_ads) = new.active_deadline_seconds {
        if !(0..=MAX_INT32).contains(&new_ads) {
            errs.push(FieldError::invalid(
                path.child("activeDeadlineSeconds"),
                new_ads,
                names::inclusive_range_error(0, MAX_INT32),
            ));
            return errs;
        }
        if old.active_deadline_seconds.is_some_and(|o| o < new_ads) {
            errs.push(FieldError::invalid(
                path.child("activeDeadlineSeconds"),
                new_ads,
                "must be less than or equal to previous value",
            ));
            return errs;
        }
    } else if old.active_deadline_seconds.is_some() {
        errs.push(FieldError::invalid(
            path.child("activeDeadlineSeconds"),
            Value::Null,
            "must not update from a positive integer to nil value",
        ));
    }
    let new_tol = new.tolerations.as_deref().unwrap_or_default();
    for o in old.tolerations.iter().flatten() {
        let kept = new_tol.iter().any(|n| {
            let mut o = o.clone();
            o.toleration_seconds = n.toleration_seconds;
            &o == n
        });
        if !kept {
            errs.push(FieldError::forbidden(
                path.child("tolerations"),
                "existing toleration can not be modified except its tolerationSeconds",
            ));
            break;
        }
    }

    // Everything else must be as it was: compare with the allowed fields carried over.
    let mut munged = new.clone();
    for (m, o) in munged.containers.iter_mut().zip(&old.containers) {
        m.image = o.image.clone();
    }
    if let (Some(m), Some(o)) = (
        munged.init_containers.as_mut(),
        old.init_containers.as_ref(),
    ) {
        for (m, o) in m.iter_mut().zip(o) {
            m.image = o.image.clone();
        }
    }
    munged.active_deadline_seconds = old.active_deadline_seconds;
    munged.scheduling_gates = old.scheduling_gates.clone();
    munged.tolerations = old.tolerations.clone();
    if old.termination_grace_period_seconds.is_some_and(|g| g < 0)
        && munged.termination_grace_period_seconds == Some(1)
    {
        munged.termination_grace_period_seconds = old.termination_grace_period_seconds;
    }
    // Removing scheduling gates is allowed; so is adding node selector terms to a gated pod.
    if old.scheduling_gates.as_ref().is_some_and(|g| !g.is_empty()) {
        munged.node_selector = old.node_selector.clone();
        munged.affinity = old.affinity.clone();
    }
    let munged_v = serde_json::to_value(&munged).unwrap_or(Value::Null);
    let old_v = serde_json::to_value(old).unwrap_or(Value::Null);
    if munged_v != old_v {
        let mut diff = Vec::new();
        json_diff("spec", &old_v, &munged_v, &mut diff);
        errs.push(FieldError::forbidden(
            path.clone(),
            format!(
                "pod updates may not change fields other than {UPDATABLE_POD_SPEC_FIELDS}\n{}",
                diff.join("\n")
            ),
        ));
    }
    errs
}

/// A short diff of two JSON values: one `-`/`+` pair per changed leaf (Kubernetes prints a Go
/// `cmp.Diff` here; the shape differs, the purpose is the same).
fn json_diff(path: &str, old: &Value, new: &Value, out: &mut Vec<String>) {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let keys: BTreeSet<&String> = o.keys().chain(n.keys()).collect();
            for k in keys {
                let null = Value::Null;
                json_diff(
                    &format!("{path}.{k}"),
                    o.get(k).unwrap_or(&null),
                    n.get(k).unwrap_or(&null),
                    out,
                );
            }
        }
        (Value::Array(o), Value::Array(n)) if o.len() == n.len() => {
            for (i, (a, b)) in o.iter().zip(n).enumerate() {
                json_diff(&format!("{path}[{i}]"), a, b, out);
            }
        }
        (a, b) if a != b => {
            out.push(format!("  {path}:"));
            if !a.is_null() {
                out.push(format!("-   {a}"));
            }
            if !b.is_null() {
                out.push(format!("+   {b}"));
            }
        }
        _ => {}
    }
}

/// `ValidatePodBinding`: the body of `pods/binding`.
pub(crate) fn validate_binding(obj: &Value) -> Result<Vec<FieldError>, FieldError> {
    let binding: Binding = decode(obj, "")?;
    let mut errs = Vec::new();
    let kind = s(&binding.target.kind);
    if !kind.is_empty() && kind != "Node" {
        errs.push(FieldError::not_supported(
            "target.kind",
            kind,
            &["Node", "<empty>"],
        ));
    }
    if s(&binding.target.name).is_empty() {
        errs.push(FieldError::required("target.name", ""));
    }
    Ok(errs)
}

/// `/status` updates of pods: the status may change, the spec may not (the strategy keeps the
/// old one); checks the fields the kubelet and scheduler write.
pub(crate) fn validate_pod_status_update(
    new: &Value,
    _old: &Value,
) -> Result<Vec<FieldError>, FieldError> {
    let pod: Pod = decode(new, "")?;
    let mut errs = Vec::new();
    let status = pod.status.unwrap_or_default();
    let nominated = s(&status.nominated_node_name);
    if !nominated.is_empty() {
        for msg in names::name_is_dns_subdomain(nominated, false) {
            errs.push(FieldError::invalid(
                "status.nominatedNodeName",
                nominated,
                msg,
            ));
        }
    }
    if let Some(phase) = status.phase.as_deref()
        && !["Pending", "Running", "Succeeded", "Failed", "Unknown"].contains(&phase)
    {
        errs.push(FieldError::not_supported(
            "status.phase",
            phase,
            &["Failed", "Pending", "Running", "Succeeded", "Unknown"],
        ));
    }
    Ok(errs)
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use serde_json::{Value, json};

    fn pod(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}, "spec": spec})
    }

    fn msgs(spec: Value) -> Vec<String> {
        create_msgs("", "Pod", pod(spec))
    }

    fn one(spec: Value) -> String {
        let m = msgs(spec);
        assert_eq!(m.len(), 1, "{m:?}");
        m[0].clone()
    }

    #[test]
    fn containers_required_and_names() {
        assert_eq!(
            one(json!({"containers": []})),
            "spec.containers: Required value"
        );
        assert_eq!(
            msgs(json!({"containers": [{"name": "a", "image": "x"}, {"name": "a", "image": "y"}]})),
            vec![r#"spec.containers[1].name: Duplicate value: "a""#]
        );
        assert_eq!(
            msgs(json!({"containers": [{"name": "Web", "image": "x"}]})),
            vec![
                r#"spec.containers[0].name: Invalid value: "Web": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"#
            ]
        );
        assert_eq!(
            msgs(json!({"containers": [{"image": "x"}]})),
            vec!["spec.containers[0].name: Required value"]
        );
        assert_eq!(
            one(json!({"containers": [{"name": "a"}]})),
            "spec.containers[0].image: Required value"
        );
        assert_eq!(
            msgs(
                json!({"containers": [{"name": "a", "image": "x"}], "initContainers": [{"name": "a", "image": "y"}]})
            ),
            vec![r#"spec.initContainers[0].name: Duplicate value: "a""#]
        );
    }

    #[test]
    fn ports() {
        let c = |ports: Value| json!({"containers": [{"name": "a", "image": "x", "ports": ports}]});
        assert!(msgs(c(json!([{"containerPort": 80, "name": "http"}, {"containerPort": 443, "protocol": "UDP"}]))).is_empty());
        assert_eq!(
            one(c(json!([{"containerPort": 70000}]))),
            "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive"
        );
        assert_eq!(
            one(c(json!([{"containerPort": 0}]))),
            "spec.containers[0].ports[0].containerPort: Required value"
        );
        assert_eq!(
            one(c(json!([{"containerPort": 80, "protocol": "HTTP"}]))),
            r#"spec.containers[0].ports[0].protocol: Unsupported value: "HTTP": supported values: "SCTP", "TCP", "UDP""#
        );
        assert_eq!(
            one(c(
                json!([{"containerPort": 80, "name": "web"}, {"containerPort": 81, "name": "web"}])
            )),
            r#"spec.containers[0].ports[1].name: Duplicate value: "web""#
        );
        assert_eq!(
            one(c(json!([{"containerPort": 80, "name": "8080"}]))),
            r#"spec.containers[0].ports[0].name: Invalid value: "8080": must contain at least one letter (a-z)"#
        );
        assert_eq!(
            one(c(json!([{"containerPort": 80, "hostPort": -1}]))),
            "spec.containers[0].ports[0].hostPort: Invalid value: -1: must be between 1 and 65535, inclusive"
        );
    }

    #[test]
    fn policies() {
        let base = |extra: Value| {
            let mut spec = json!({"containers": [{"name": "a", "image": "x"}]});
            for (k, v) in extra.as_object().unwrap() {
                spec[k] = v.clone();
            }
            spec
        };
        assert_eq!(
            one(base(json!({"restartPolicy": "Sometimes"}))),
            r#"spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never""#
        );
        assert_eq!(
            one(base(json!({"dnsPolicy": "Google"}))),
            r#"spec.dnsPolicy: Unsupported value: "Google": supported values: "ClusterFirst", "ClusterFirstWithHostNet", "Default", "None""#
        );
        assert_eq!(
            one(base(json!({"nodeName": "Node_1"}))),
            r#"spec.nodeName: Invalid value: "Node_1": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"#
        );
        assert_eq!(
            one(base(json!({"activeDeadlineSeconds": 0}))),
            "spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive"
        );
        assert_eq!(
            one(
                json!({"containers": [{"name": "a", "image": "x", "imagePullPolicy": "Sometimes"}]})
            ),
            r#"spec.containers[0].imagePullPolicy: Unsupported value: "Sometimes": supported values: "Always", "IfNotPresent", "Never""#
        );
    }

    #[test]
    fn env_vars() {
        let c = |env: Value| json!({"containers": [{"name": "a", "image": "x", "env": env}]});
        assert!(
            msgs(c(
                json!([{"name": "MY_VAR", "value": "1"}, {"name": "1.weird-but-ok"}])
            ))
            .is_empty()
        );
        assert_eq!(
            one(c(json!([{"name": "A=B"}]))),
            r#"spec.containers[0].env[0].name: Invalid value: "A=B": a valid environment variable name must consist only of printable ASCII characters other than '='"#
        );
        assert_eq!(
            msgs(c(json!([{"name": ""}]))),
            vec![
                "spec.containers[0].env[0].name: Required value",
                r#"spec.containers[0].env[0].name: Invalid value: "": environment variable name must be non-empty"#
            ]
        );
        assert_eq!(
            one(c(
                json!([{"name": "A", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}])
            )),
            r#"spec.containers[0].env[0].valueFrom: Invalid value: "": may not be specified when `value` is not empty"#
        );
        assert_eq!(
            one(c(json!([{"name": "A", "valueFrom": {}}]))),
            r#"spec.containers[0].env[0].valueFrom: Invalid value: "": must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"#
        );
        assert_eq!(
            one(c(
                json!([{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": ""}}}])
            )),
            "spec.containers[0].env[0].valueFrom.secretKeyRef.key: Required value"
        );
    }

    #[test]
    fn volumes_and_mounts() {
        let spec = |vols: Value, mounts: Value| json!({"volumes": vols, "containers": [{"name": "a", "image": "x", "volumeMounts": mounts}]});
        assert!(msgs(spec(
            json!([{"name": "data", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "c"}}, {"name": "bare"}]),
            json!([{"name": "data", "mountPath": "/data"}, {"name": "cfg", "mountPath": "/cfg", "subPath": "x"}])
        ))
        .is_empty());
        assert_eq!(
            one(spec(
                json!([{"name": "data", "emptyDir": {}}]),
                json!([{"name": "logs", "mountPath": "/logs"}])
            )),
            r#"spec.containers[0].volumeMounts[0].name: Not found: "logs""#
        );
        assert_eq!(
            msgs(spec(
                json!([{"name": "d", "emptyDir": {}}, {"name": "d", "emptyDir": {}}]),
                json!([])
            )),
            vec![r#"spec.volumes[1].name: Duplicate value: "d""#]
        );
        assert_eq!(
            msgs(spec(
                json!([{"name": "d", "emptyDir": {}, "configMap": {"name": "c"}}]),
                json!([])
            )),
            vec!["spec.volumes[0].configMap: Forbidden: may not specify more than 1 volume type"]
        );
        assert_eq!(
            msgs(spec(json!([{"name": "d", "secret": {}}]), json!([]))),
            vec!["spec.volumes[0].secret.secretName: Required value"]
        );
        assert_eq!(
            msgs(spec(
                json!([{"name": "d", "emptyDir": {}}]),
                json!([{"name": "d", "mountPath": "/a"}, {"name": "d", "mountPath": "/a"}])
            )),
            vec![
                r#"spec.containers[0].volumeMounts[1].mountPath: Invalid value: "/a": must be unique"#
            ]
        );
        assert_eq!(
            msgs(spec(json!([{"name": "Data", "emptyDir": {}}]), json!([]))).len(),
            1
        );
        assert_eq!(
            msgs(spec(
                json!([{"name": "d", "secret": {"secretName": "s", "defaultMode": 1000}}]),
                json!([])
            )),
            vec![
                "spec.volumes[0].secret.defaultMode: Invalid value: 1000: must be a number between 0 and 0777 (octal), both inclusive"
            ]
        );
    }

    #[test]
    fn probes() {
        let c = |probe: Value| json!({"containers": [{"name": "a", "image": "x", "livenessProbe": probe}]});
        assert!(msgs(c(json!({"httpGet": {"port": 8080}}))).is_empty());
        assert!(msgs(c(json!({"tcpSocket": {"port": "http"}}))).is_empty());
        assert_eq!(
            one(c(json!({"periodSeconds": 5}))),
            "spec.containers[0].livenessProbe: Required value: must specify a handler type"
        );
        assert_eq!(
            one(c(
                json!({"exec": {"command": ["true"]}, "httpGet": {"port": 80}})
            )),
            "spec.containers[0].livenessProbe.httpGet: Forbidden: may not specify more than 1 handler type"
        );
        assert_eq!(
            one(c(
                json!({"exec": {"command": ["true"]}, "successThreshold": 2})
            )),
            "spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1"
        );
        assert_eq!(
            one(c(
                json!({"exec": {"command": ["true"]}, "timeoutSeconds": -1})
            )),
            "spec.containers[0].livenessProbe.timeoutSeconds: Invalid value: -1: must be greater than or equal to 0"
        );
        assert_eq!(
            one(c(json!({"httpGet": {"port": 0}}))),
            "spec.containers[0].livenessProbe.httpGet.port: Invalid value: 0: must be between 1 and 65535, inclusive"
        );
        assert_eq!(
            one(c(json!({"exec": {}}))),
            "spec.containers[0].livenessProbe.exec.command: Required value"
        );
        let r = json!({"containers": [{"name": "a", "image": "x", "readinessProbe": {"exec": {"command": ["true"]}, "successThreshold": 3, "terminationGracePeriodSeconds": 5}}]});
        assert_eq!(
            one(r),
            "spec.containers[0].readinessProbe.terminationGracePeriodSeconds: Invalid value: 5: must not be set for readinessProbes"
        );
    }

    #[test]
    fn resources() {
        let c = |res: Value| json!({"containers": [{"name": "a", "image": "x", "resources": res}]});
        assert!(msgs(c(json!({"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}}))).is_empty());
        assert_eq!(
            one(c(json!({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}))),
            r#"spec.containers[0].resources.requests: Invalid value: "2": must be less than or equal to cpu limit of 1"#
        );
        assert_eq!(
            one(c(
                json!({"requests": {"memory": "1.5Gi"}, "limits": {"memory": "1Gi"}})
            )),
            r#"spec.containers[0].resources.requests: Invalid value: "1536Mi": must be less than or equal to memory limit of 1Gi"#
        );
        assert_eq!(
            one(c(json!({"requests": {"cpu": "abc"}}))),
            r#"spec.containers[0].resources.requests[cpu]: Invalid value: "abc": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"#
        );
        assert_eq!(
            one(c(json!({"requests": {"cpu": "-1"}}))),
            r#"spec.containers[0].resources.requests[cpu]: Invalid value: "-1": must be greater than or equal to 0"#
        );
        // Requests are defaulted from limits, so both are reported.
        assert_eq!(
            msgs(c(json!({"limits": {"gpu": "1"}}))),
            vec![
                r#"spec.containers[0].resources.limits[gpu]: Invalid value: "gpu": must be a standard resource for containers"#,
                r#"spec.containers[0].resources.requests[gpu]: Invalid value: "gpu": must be a standard resource for containers"#
            ]
        );
        assert_eq!(
            msgs(c(json!({"limits": {"requests.example.com/gpu": "1"}})))[0],
            r#"spec.containers[0].resources.limits[requests.example.com/gpu]: Invalid value: "requests.example.com/gpu": doesn't follow extended resource name standard"#
        );
        assert_eq!(
            one(c(json!({"requests": {"example.com/gpu": "1"}}))),
            "spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable resources"
        );
        assert_eq!(
            one(c(
                json!({"requests": {"example.com/gpu": "1"}, "limits": {"example.com/gpu": "2"}})
            )),
            r#"spec.containers[0].resources.requests: Invalid value: "1": must be equal to example.com/gpu limit of 2"#
        );
    }

    #[test]
    fn lifecycle_and_host_network() {
        assert_eq!(
            one(json!({"containers": [{"name": "a", "image": "x", "lifecycle": {"preStop": {}}}]})),
            "spec.containers[0].lifecycle.preStop: Required value: must specify a handler type"
        );
        assert!(msgs(json!({"containers": [{"name": "a", "image": "x", "lifecycle": {"preStop": {"sleep": {"seconds": 5}}}}]})).is_empty());
        assert_eq!(
            one(
                json!({"hostNetwork": true, "containers": [{"name": "a", "image": "x", "ports": [{"containerPort": 80, "hostPort": 81}]}]})
            ),
            "spec.containers[0].ports[0].hostPort: Invalid value: 81: must match `containerPort` when `hostNetwork` is true"
        );
    }

    #[test]
    fn affinity() {
        let a = |affinity: Value| json!({"containers": [{"name": "a", "image": "x"}], "affinity": affinity});
        assert!(msgs(a(json!({
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]},
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "preference": {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}}]
            },
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}
        })))
        .is_empty());
        assert_eq!(
            one(a(
                json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}})
            )),
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms: Required value: must have at least one node selector term"
        );
        assert_eq!(
            one(a(
                json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In"}]}]}}})
            )),
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'"
        );
        assert_eq!(
            one(a(
                json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 0, "preference": {}}]}})
            )),
            "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight: Invalid value: 0: must be in the range 1-100"
        );
        let m = msgs(a(
            json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {"matchLabels": {"app": "web"}}}]}}),
        ));
        assert_eq!(
            m[0],
            "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey: Required value: can not be empty"
        );
    }

    #[test]
    fn security_contexts() {
        assert_eq!(
            one(
                json!({"securityContext": {"runAsUser": -1}, "containers": [{"name": "a", "image": "x"}]})
            ),
            "spec.securityContext.runAsUser: Invalid value: -1: must be between 0 and 2147483647, inclusive"
        );
        assert_eq!(
            one(
                json!({"containers": [{"name": "a", "image": "x", "securityContext": {"runAsGroup": 4294967296i64}}]})
            ),
            "spec.containers[0].securityContext.runAsGroup: Invalid value: 4294967296: must be between 0 and 2147483647, inclusive"
        );
        let m = one(
            json!({"containers": [{"name": "a", "image": "x", "securityContext": {"privileged": true, "allowPrivilegeEscalation": false}}]}),
        );
        assert!(
            m.starts_with("spec.containers[0].securityContext: Invalid value: ")
                && m.ends_with(
                    ": cannot set `allowPrivilegeEscalation` to false and `privileged` to true"
                ),
            "{m}"
        );
    }

    #[test]
    fn bindings() {
        let ok = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}});
        assert!(super::super::validate_subresource("binding", &ok).is_empty());
        let bad = json!({"metadata": {"name": "p"}, "target": {"kind": "Pod"}});
        let msgs: Vec<String> = super::super::validate_subresource("binding", &bad)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            msgs,
            vec![
                r#"target.kind: Unsupported value: "Pod": supported values: "Node", "<empty>""#,
                "target.name: Required value"
            ]
        );
    }

    #[test]
    fn tolerations() {
        let t =
            |tol: Value| json!({"containers": [{"name": "a", "image": "x"}], "tolerations": [tol]});
        assert!(
            msgs(t(
                json!({"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"})
            ))
            .is_empty()
        );
        assert!(msgs(t(json!({"operator": "Exists"}))).is_empty());
        assert_eq!(
            one(t(
                json!({"key": "k", "operator": "Exists", "effect": "Sometimes"})
            )),
            r#"spec.tolerations[0].effect: Unsupported value: "Sometimes": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute""#
        );
        assert_eq!(
            one(t(json!({"key": "k", "operator": "In"}))),
            r#"spec.tolerations[0].operator: Unsupported value: "In": supported values: "Equal", "Exists""#
        );
        assert_eq!(
            one(t(json!({"operator": "Equal", "value": "x"}))),
            r#"spec.tolerations[0].operator: Invalid value: "Equal": operator must be Exists when `key` is empty, which means "match all values and all keys""#
        );
        assert_eq!(
            one(t(
                json!({"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5})
            )),
            r#"spec.tolerations[0].effect: Invalid value: "NoSchedule": effect must be 'NoExecute' when `tolerationSeconds` is set"#
        );
    }

    fn running(spec: Value) -> Value {
        let mut p = pod(spec);
        p["metadata"]["namespace"] = json!("default");
        p["metadata"]["resourceVersion"] = json!("1");
        p
    }

    #[test]
    fn pod_updates_allow_images_deadlines_and_new_tolerations() {
        let old = running(
            json!({"containers": [{"name": "a", "image": "nginx:1"}], "activeDeadlineSeconds": 100, "tolerations": [{"key": "k", "operator": "Exists"}]}),
        );
        let new = running(
            json!({"containers": [{"name": "a", "image": "nginx:2"}], "activeDeadlineSeconds": 50, "tolerations": [{"key": "k", "operator": "Exists"}, {"key": "j", "operator": "Exists"}]}),
        );
        // The image tag changes the defaulted pull policy; keep it explicit to isolate the image.
        let mut old = old;
        let mut new = new;
        old["spec"]["containers"][0]["imagePullPolicy"] = json!("IfNotPresent");
        new["spec"]["containers"][0]["imagePullPolicy"] = json!("IfNotPresent");
        assert_eq!(update_msgs("", "Pod", new, old), Vec::<String>::new());
    }

    #[test]
    fn pod_updates_forbid_other_changes() {
        let old = running(json!({"containers": [{"name": "a", "image": "nginx"}]}));
        let mut new = old.clone();
        new["spec"]["restartPolicy"] = json!("Never");
        let m = update_msgs("", "Pod", new, old.clone());
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(
            m[0].starts_with("spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)\n"),
            "{}",
            m[0]
        );
        assert!(m[0].contains("spec.restartPolicy"), "{}", m[0]);

        let mut new = old.clone();
        new["spec"]["containers"] =
            json!([{"name": "a", "image": "nginx"}, {"name": "b", "image": "x"}]);
        assert_eq!(
            update_msgs("", "Pod", new, old.clone()),
            vec!["spec.containers: Forbidden: pod updates may not add or remove containers"]
        );

        let mut with_deadline = old.clone();
        with_deadline["spec"]["activeDeadlineSeconds"] = json!(10);
        let mut new = old.clone();
        new["spec"]["activeDeadlineSeconds"] = json!(20);
        assert_eq!(
            update_msgs("", "Pod", new, with_deadline.clone()),
            vec![
                "spec.activeDeadlineSeconds: Invalid value: 20: must be less than or equal to previous value"
            ]
        );
        assert_eq!(
            update_msgs("", "Pod", old.clone(), with_deadline),
            vec![
                "spec.activeDeadlineSeconds: Invalid value: null: must not update from a positive integer to nil value"
            ]
        );

        let mut tol = old.clone();
        tol["spec"]["tolerations"] = json!([{"key": "k", "operator": "Exists"}]);
        assert_eq!(
            update_msgs("", "Pod", old, tol),
            vec![
                "spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds"
            ]
        );
    }

    /// Defaults both and validates a write through `pods/ephemeralcontainers` (after the
    /// strategy took everything but `spec.ephemeralContainers` from `old`).
    fn ephemeral_msgs(new_ephemeral: Value, old: &Value) -> Vec<String> {
        let kind = crate::builtin::by_kind("", "Pod");
        // What a client sends: any pod, of which only the ephemeral containers count.
        let mut new = json!({"metadata": {"name": "web"},
                             "spec": {"nodeName": "elsewhere",
                                      "ephemeralContainers": new_ephemeral}});
        let mut old = old.clone();
        kind.default(&mut old);
        crate::strategy::prepare_for_subresource_update(
            &*kind,
            kind.subresource_fields("ephemeralcontainers").unwrap(),
            &mut new,
            &old,
        );
        assert_eq!(new["spec"]["nodeName"], old["spec"]["nodeName"]);
        kind.default(&mut new);
        super::super::validate_subresource_update(&*kind, "ephemeralcontainers", &new, &old)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn web() -> Value {
        running(json!({"containers": [{"name": "app", "image": "nginx"}],
                       "initContainers": [{"name": "setup", "image": "busybox"}]}))
    }

    #[test]
    fn ephemeral_containers_may_be_added() {
        let m = ephemeral_msgs(
            json!([{"name": "dbg", "image": "busybox", "targetContainerName": "app",
                    "stdin": true, "tty": true, "command": ["sh"]}]),
            &web(),
        );
        assert_eq!(m, Vec::<String>::new());
    }

    #[test]
    fn ephemeral_containers_are_checked_like_kubernetes() {
        let m = ephemeral_msgs(
            json!([
                {"name": "app", "image": "busybox"},
                {"name": "setup", "image": "busybox"},
                {"name": "a", "image": "busybox", "targetContainerName": "nope"},
                {"name": "b"},
                {"name": "c", "image": "busybox", "ports": [{"containerPort": 80}],
                 "readinessProbe": {"exec": {"command": ["true"]}},
                 "lifecycle": {"preStop": {"exec": {"command": ["true"]}}},
                 "resources": {"limits": {"cpu": "1"}}},
                {"name": "a", "image": "busybox"},
            ]),
            &web(),
        );
        let expected = [
            r#"spec.ephemeralContainers[0].name: Duplicate value: "app""#,
            r#"spec.ephemeralContainers[1].name: Duplicate value: "setup""#,
            r#"spec.ephemeralContainers[2].targetContainerName: Not found: "nope""#,
            "spec.ephemeralContainers[3].image: Required value",
            "spec.ephemeralContainers[4].ports: Forbidden: cannot be set for an Ephemeral Container",
            "spec.ephemeralContainers[4].resources: Forbidden: cannot be set for an Ephemeral Container",
            "spec.ephemeralContainers[4].readinessProbe: Forbidden: cannot be set for an Ephemeral Container",
            "spec.ephemeralContainers[4].lifecycle: Forbidden: cannot be set for an Ephemeral Container",
            r#"spec.ephemeralContainers[5].name: Duplicate value: "a""#,
        ];
        for e in expected {
            assert!(m.iter().any(|x| x == e), "missing {e:?} in {m:#?}");
        }
        assert_eq!(m.len(), expected.len(), "{m:#?}");
    }

    #[test]
    fn existing_ephemeral_containers_may_not_be_removed_or_changed() {
        let mut old = web();
        old["spec"]["ephemeralContainers"] = json!([{"name": "dbg", "image": "busybox"}]);
        // Adding one more keeps the first: fine.
        assert_eq!(
            ephemeral_msgs(
                json!([{"name": "dbg", "image": "busybox"}, {"name": "dbg2", "image": "busybox"}]),
                &old
            ),
            Vec::<String>::new()
        );
        let m = ephemeral_msgs(json!([]), &old);
        assert_eq!(
            m,
            vec![
                "spec.ephemeralContainers: Forbidden: existing ephemeral containers \"dbg\" may not be removed\n"
            ]
        );
        let m = ephemeral_msgs(json!([{"name": "dbg", "image": "alpine"}]), &old);
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(
            m[0].starts_with(
                "spec.ephemeralContainers: Forbidden: existing ephemeral containers \"dbg\" may not be changed\n"
            ),
            "{}",
            m[0]
        );
        assert!(m[0].contains("alpine"), "{}", m[0]);
    }

    #[test]
    fn ephemeral_containers_only_through_their_subresource() {
        // Not on create...
        let mut spec = json!({"containers": [{"name": "app", "image": "nginx"}],
                              "ephemeralContainers": [{"name": "dbg", "image": "busybox"}]});
        assert_eq!(
            one(spec.clone()),
            "spec.ephemeralContainers: Forbidden: cannot be set on create"
        );
        // ... nor by a pod update.
        let old = web();
        let mut new = old.clone();
        new["spec"]["ephemeralContainers"] = spec["ephemeralContainers"].take();
        let m = update_msgs("", "Pod", new, old);
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(
            m[0].starts_with("spec: Forbidden: pod updates may not change fields other than"),
            "{}",
            m[0]
        );
        assert!(m[0].contains("ephemeralContainers"), "{}", m[0]);
    }
}
