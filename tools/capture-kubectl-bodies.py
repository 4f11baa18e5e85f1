#!/usr/bin/env python3
"""Record the request bodies kubectl sends, for the protobuf decoder's fixtures.

A loopback-only fake API server: answers /version and aggregated discovery for the resources the
fixtures need, records every POST/PUT body (with its Content-Type) into OUT_DIR, and answers 201
with a small JSON object so kubectl is satisfied.

Usage: capture-kubectl-bodies.py PORT OUT_DIR MINOR
  then point kubectl at http://127.0.0.1:PORT (plain HTTP, no credentials).
"""
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, OUT, MINOR = int(sys.argv[1]), sys.argv[2], sys.argv[3]
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
        subs=[("eviction", "policy", "Eviction", ["create"]), ("binding", "", "Binding", ["create"])]),
    res("nodes", "Node", "", scoped=False, short=["no"]),
]
APPS = [res("deployments", "Deployment", "apps", short=["deploy"],
            subs=[("scale", "autoscaling", "Scale", ["get", "patch", "update"])])]


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
            self.reply(200, listing([("", CORE)]), DISCOVERY_CT)
        elif path == "/apis":
            self.reply(200, listing([("apps", APPS)]), DISCOVERY_CT)
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
        for r in CORE + APPS:
            if r["resource"] in parts:
                kind = r["responseKind"]["kind"]
                group = r["responseKind"]["group"]
                api_version = f"{group}/v1" if group else "v1"
        self.reply(201, {"kind": kind, "apiVersion": api_version,
                         "metadata": {"name": parts[-1], "namespace": "default"}})

    do_POST = record
    do_PUT = record


os.makedirs(OUT, exist_ok=True)
ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
