//! The install manifests of well-known projects (kept in `tests/testdata/installs`, where their
//! README says where each comes from), applied with kubectl v1.32 as their projects tell users
//! to: every object is accepted and stored, their CustomResourceDefinitions are served, their
//! admission webhooks are registered and called, and metrics-server's APIService takes over
//! the metrics API from skiff's own.
//!
//! prometheus-operator and argo-cd are applied server-side, as their documentation says: some of
//! their CRDs are larger than the 256 KiB that kubectl's client-side
//! `last-applied-configuration` annotation may hold (kube-apiserver refuses those the same way).

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;
use skiff_tests::{Kubectl, TestCluster};

/// The directory of the manifests.
fn testdata() -> PathBuf {
    crate::package_dir().join("testdata/installs")
}

/// `name`'s manifest as a plain YAML file in `dir` (the large ones are kept gzipped).
fn manifest(name: &str, dir: &Path) -> PathBuf {
    let plain = testdata().join(format!("{name}.yaml"));
    if plain.exists() {
        return plain;
    }
    let packed = testdata().join(format!("{name}.yaml.gz"));
    let file = std::fs::File::open(&packed).unwrap_or_else(|e| panic!("{}: {e}", packed.display()));
    let mut text = String::new();
    flate2::read::GzDecoder::new(file)
        .read_to_string(&mut text)
        .expect("a gzipped YAML manifest");
    let out = dir.join(format!("{name}.yaml"));
    std::fs::write(&out, text).expect("writing the manifest");
    out
}

/// The number of objects in a manifest: its documents with a top-level `kind`.
fn objects_in(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .expect("manifest")
        .lines()
        .filter(|l| l.starts_with("kind:"))
        .count()
}

/// The documents of a manifest whose `kind` is one of `kinds`, as one multi-document YAML.
fn documents_of(path: &Path, kinds: &[&str]) -> String {
    let text = std::fs::read_to_string(path).expect("manifest");
    text.split("\n---")
        .filter(|doc| {
            doc.lines()
                .any(|l| kinds.iter().any(|k| l == format!("kind: {k}")))
        })
        .collect::<Vec<_>>()
        .join("\n---")
}

/// Applies `file` (extra `args`) and checks that kubectl reported every object as `verb`
/// (`created`, `serverside-applied`) with no error; the output.
fn apply(k: &Kubectl, file: &Path, args: &[&str], verb: &str) -> String {
    let path = file.to_str().expect("utf-8 path");
    let mut command = vec!["apply", "-f", path];
    command.extend_from_slice(args);
    let out = k.ok(&command);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), objects_in(file), "{}:\n{out}", file.display());
    for line in &lines {
        assert!(line.ends_with(verb), "{}: {line}", file.display());
    }
    out
}

/// Every object of `file` is there to read back.
fn all_stored(k: &Kubectl, file: &Path, args: &[&str]) {
    let path = file.to_str().expect("utf-8 path");
    let mut command = vec!["get", "-f", path, "-o", "name"];
    command.extend_from_slice(args);
    let names = k.ok(&command);
    assert_eq!(
        names.lines().count(),
        objects_in(file),
        "{}:\n{names}",
        file.display()
    );
}

#[test]
fn install_manifests_of_well_known_projects_apply_and_register() {
    let cluster = TestCluster::start(&[]);
    let k = cluster.kubectl().bundled("1.32");
    let dir = cluster.dir.path();

    // Client-side, as their READMEs say: ingress-nginx and cert-manager.
    let ingress_nginx = manifest("ingress-nginx", dir);
    let cert_manager = manifest("cert-manager", dir);
    apply(&k, &ingress_nginx, &[], " created");
    apply(&k, &cert_manager, &[], " created");
    // Applying again changes none of the RBAC bindings: a ServiceAccount subject is stored
    // without an empty `apiGroup`, as kube-apiserver stores it.
    let again = k.ok(&["apply", "-f", ingress_nginx.to_str().unwrap()]);
    let bindings: Vec<&str> = again.lines().filter(|l| l.contains("binding")).collect();
    assert_eq!(bindings.len(), 4, "{again}");
    for line in bindings {
        assert!(line.ends_with(" unchanged"), "{again}");
    }
    // And a server-side apply takes those bindings over from the client-side one without a
    // conflict.
    let rbac = documents_of(&ingress_nginx, &["RoleBinding", "ClusterRoleBinding"]);
    let switched = k.ok_with_input(&["apply", "--server-side", "-f", "-"], &rbac);
    assert_eq!(
        switched.matches("serverside-applied").count(),
        4,
        "{switched}"
    );

    // Server-side: metrics-server (over skiff's own APIService for the metrics API, without a
    // conflict), prometheus-operator and argo-cd (in the namespace its instructions create).
    let metrics_server = manifest("metrics-server", dir);
    let prometheus_operator = manifest("prometheus-operator", dir);
    let argo_cd = manifest("argo-cd", dir);
    let server_side = |file: &Path, args: &[&str]| {
        let mut args = args.to_vec();
        args.push("--server-side");
        apply(&k, file, &args, " serverside-applied")
    };
    server_side(&metrics_server, &[]);
    server_side(&prometheus_operator, &[]);
    k.ok(&["create", "namespace", "argocd"]);
    server_side(&argo_cd, &["-n", "argocd"]);
    // Applying again is no conflict either.
    server_side(&prometheus_operator, &[]);

    for (file, args) in [
        (&ingress_nginx, &[][..]),
        (&cert_manager, &[]),
        (&metrics_server, &[]),
        (&prometheus_operator, &[]),
        (&argo_cd, &["-n", "argocd"]),
    ] {
        all_stored(&k, file, args);
    }

    // Every definition is established and served.
    let crds: Value = serde_json::from_str(&k.ok(&["get", "crd", "-o", "json"])).unwrap();
    let crds = crds["items"].as_array().unwrap();
    assert!(crds.len() >= 6 + 10 + 3, "{} CRDs", crds.len());
    for crd in crds {
        let established = crd["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Established" && c["status"] == "True");
        assert!(established, "{}", crd["metadata"]["name"]);
    }
    let resources = k.ok(&["api-resources", "-o", "name"]);
    for resource in [
        "certificates.cert-manager.io",
        "servicemonitors.monitoring.coreos.com",
        "prometheuses.monitoring.coreos.com",
        "applications.argoproj.io",
        "appprojects.argoproj.io",
    ] {
        assert!(resources.lines().any(|l| l == resource), "{resource}");
    }
    // Their custom resources are accepted.
    k.ok_with_input(
        &["apply", "-f", "-"],
        r#"
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: web, namespace: default}
spec:
  selector: {matchLabels: {app: web}}
  endpoints: [{port: http, interval: 30s}]
---
apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata: {name: team, namespace: argocd}
spec:
  sourceRepos: ["*"]
  destinations: [{namespace: "*", server: "https://kubernetes.default.svc"}]
"#,
    );

    // The webhooks are registered, and called: with no pod behind ingress-nginx's admission
    // Service, its `failurePolicy: Fail` webhook refuses an Ingress of its class, by name, in
    // kube-apiserver's words.
    let validating = k.ok(&["get", "validatingwebhookconfigurations", "-o", "name"]);
    let mutating = k.ok(&["get", "mutatingwebhookconfigurations", "-o", "name"]);
    for (list, name) in [
        (&validating, "ingress-nginx-admission"),
        (&validating, "cert-manager-webhook"),
        (&mutating, "cert-manager-webhook"),
    ] {
        assert!(
            list.lines().any(|l| l.ends_with(&format!("/{name}"))),
            "{name}: {list}"
        );
    }
    let refused = k
        .run_with_input(
            &["apply", "-f", "-"],
            r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: default}
spec:
  ingressClassName: nginx
  rules: [{host: web.example, http: {paths: [{path: /, pathType: Prefix,
          backend: {service: {name: web, port: {number: 80}}}}]}}]
"#,
        )
        .stderr;
    assert!(
        refused.contains("validate.nginx.ingress.kubernetes.io")
            && refused.contains(
                "no endpoints available for service \"ingress-nginx-controller-admission\""
            ),
        "{refused}"
    );

    // metrics-server's APIService now sends the metrics API to its Service.
    let service = k.ok(&[
        "get",
        "apiservice",
        "v1beta1.metrics.k8s.io",
        "-o",
        "jsonpath={.spec.service.namespace}/{.spec.service.name}",
    ]);
    assert_eq!(service, "kube-system/metrics-server");
}
