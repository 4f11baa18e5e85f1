#!/usr/bin/env python3
"""Record the request bodies kubectl sends, for the protobuf decoder's fixtures.

A loopback-only fake API server: answers /version and aggregated discovery for the resources the
fixtures need, records every POST/PUT body (with its Content-Type) into OUT_DIR, and answers 201
with a small JSON object so kubectl is satisfied.

Usage: capture-kubectl-bodies.py PORT OUT_DIR MINOR [no-eviction]
  then point kubectl at http://127.0.0.1:PORT (plain HTTP, no credentials).
  With `no-eviction` discovery lists no pods/eviction subresource, so `kubectl drain` deletes the
  pods (DELETE with a DeleteOptions body) instead of evicting them.
"""
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, OUT, MINOR = int(sys.argv[1]), sys.argv[2], sys.argv[3]
EVICTION = sys.argv[4:5] != ["no-eviction"]
VERBS = ["get", "list", "watch", "create", "update", "patch", "delete"]


def res(name, kind, group, scoped=True, short=None, subs=()):
    r = {
        "resource": name,
        "responseKind": {"group": group, "version": "v1", "kind": kind},
        "scope": "Namespaced" if scoped else "Cluster",
        "verbs": VERBS,
    }
    if short:
        r["shortNames"] = short
    if subs:
        r["subresources"] = [
            {"subresource": s, "responseKind": {"group": g, "version": "v1", "kind": k}, "verbs": v}
            for (s, g, k, v) in subs
        ]
    return r


CORE = [
    res("namespaces", "Namespace", "", scoped=False, short=["ns"]),
    res("configmaps", "ConfigMap", "", short=["cm"]),
    res("secrets", "Secret", ""),
    res("services", "Service", "", short=["svc"]),
    res("serviceaccounts", "ServiceAccount", "", short=["sa"],
        subs=[("token", "authentication.k8s.io", "TokenRequest", ["create"])]),
    res("pods", "Pod", "", short=["po"],
        subs=([("eviction", "policy", "Eviction", ["create"])] if EVICTION else [])
        + [("binding", "", "Binding", ["create"])]),
    res("events", "Event", "", short=["ev"]),
    res("nodes", "Node", "", scoped=False, short=["no"]),
]
APPS = [res("deployments", "Deployment", "apps", short=["deploy"],
            subs=[("scale", "autoscaling", "Scale", ["get", "patch", "update"])])]
POLICY = [res("poddisruptionbudgets", "PodDisruptionBudget", "policy", short=["pdb"])]
# Kinds the API server does not serve: fixtures that exercise more of the decoder's table.
MORE_CORE = [res("resourcequotas", "ResourceQuota", "", short=["quota"])]
MORE_GROUPS = [
    ("batch", [res("jobs", "Job", "batch"), res("cronjobs", "CronJob", "batch", short=["cj"])]),
    ("networking.k8s.io", [res("ingresses", "Ingress", "networking.k8s.io", short=["ing"])]),
    ("rbac.authorization.k8s.io", [res("roles", "Role", "rbac.authorization.k8s.io"),
                                   res("rolebindings", "RoleBinding", "rbac.authorization.k8s.io")]),
    ("scheduling.k8s.io", [res("priorityclasses", "PriorityClass", "scheduling.k8s.io", scoped=False,
                               short=["pc"])]),
]

# Objects the scenarios read: drain reads node n1 and its pods, then waits for pod p to go;
# scale --current-replicas reads deployment web's scale.
POD = {"kind": "Pod", "apiVersion": "v1",
       "metadata": {"name": "p", "namespace": "default", "uid": "u-p",
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                                         "uid": "u-rs", "controller": True}]},
       "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "nginx"}]},
       "status": {"phase": "Running"}}
OBJECTS = {
    "/api/v1/nodes/n1": {"kind": "Node", "apiVersion": "v1", "metadata": {"name": "n1"},
                         "spec": {"unschedulable": True}},
    "/api/v1/pods": {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [POD]},
    "/apis/apps/v1/namespaces/default/deployments/web": {
        "kind": "Deployment", "apiVersion": "apps/v1",
        "metadata": {"name": "web", "namespace": "default", "resourceVersion": "5"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}}},
    "/apis/apps/v1/namespaces/default/deployments/web/scale": {
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {"name": "web", "namespace": "default", "resourceVersion": "5"},
        "spec": {"replicas": 2}, "status": {"replicas": 2, "selector": "app=web"}},
}


def listing(groups):
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": [
            {"metadata": {"name": n}, "versions": [{"version": "v1", "resources": rs}]}
            for (n, rs) in groups
        ],
    }


DISCOVERY_CT = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
COUNTER = [0]


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, code, obj, ct="application/json"):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", ct)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/version":
            self.reply(200, {"major": "1", "minor": MINOR, "gitVersion": f"v1.{MINOR}.0"})
        elif path == "/api":
            self.reply(200, listing([("", CORE + MORE_CORE)]), DISCOVERY_CT)
        elif path == "/apis":
            self.reply(200, listing([("apps", APPS), ("policy", POLICY)] + MORE_GROUPS), DISCOVERY_CT)
        elif path == "/api/v1":
            # drain checks eviction support through the legacy resource list.
            self.reply(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1",
                             "resources": [
                                 {"name": "pods", "singularName": "pod", "namespaced": True,
                                  "kind": "Pod", "verbs": VERBS}]
                             + ([{"name": "pods/eviction", "singularName": "", "namespaced": True,
                                  "group": "policy", "version": "v1", "kind": "Eviction",
                                  "verbs": ["create"]}] if EVICTION else [])})
        elif path == "/api/v1/namespaces/default/pods/p":
            # Evicted: drain's wait ends at once.
            self.reply(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                             "reason": "NotFound", "code": 404, "message": "pods \"p\" not found"})
        elif path in OBJECTS:
            self.reply(200, OBJECTS[path])
        else:
            self.reply(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                             "reason": "NotFound", "code": 404, "message": "not found"})

    def record(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        COUNTER[0] += 1
        stem = os.path.join(OUT, f"req{COUNTER[0]:03d}")
        with open(stem + ".bin", "wb") as f:
            f.write(body)
        with open(stem + ".meta", "w") as f:
            json.dump({"method": self.command, "path": self.path,
                       "content_type": self.headers.get("Content-Type")}, f)
        parts = self.path.split("?")[0].strip("/").split("/")
        kind, api_version = "Status", "v1"
        for r in CORE + APPS + POLICY + MORE_CORE + [r for _, rs in MORE_GROUPS for r in rs]:
            if r["resource"] in parts:
                kind = r["responseKind"]["kind"]
                group = r["responseKind"]["group"]
                api_version = f"{group}/v1" if group else "v1"
        if parts[-1] == "token":
            self.reply(201, {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                             "metadata": {"name": parts[-2], "namespace": "default"},
                             "spec": {"audiences": ["a"]},
                             "status": {"token": "t0k3n", "expirationTimestamp": "2030-01-01T00:00:00Z"}})
        elif parts[-1] == "eviction":
            self.reply(201, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                             "status": "Success", "code": 201})
        elif parts[-1] == "scale":
            obj = dict(OBJECTS["/apis/apps/v1/namespaces/default/deployments/web/scale"])
            obj["spec"] = {"replicas": 3}
            self.reply(200, obj)
        else:
            self.reply(201, {"kind": kind, "apiVersion": api_version,
                             "metadata": {"name": parts[-1], "namespace": "default"}})

    do_POST = record
    do_PUT = record
    do_DELETE = record


os.makedirs(OUT, exist_ok=True)
ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
