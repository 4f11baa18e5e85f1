#!/usr/bin/env python3
"""Generate kinds/src/protobuf/schema.rs: the table the Kubernetes protobuf decoder walks.

Inputs (all read-only, nothing is copied into the repository):
  * k8s-pb 0.9.0 (prost-generated structs in the local cargo registry): message names, field tags
    and wire types (`#[prost(string, optional, tag = "2")]`), embedded message types.
  * k8s-openapi 0.29.0 (`src/v1_33`): the JSON name of each field (`"hostIPC" => Field::Key_host_ipc`),
    and the (apiVersion, kind) of every top-level resource (`impl crate::Resource`).
  * the Go types of kubernetes/api and kubernetes/apimachinery at branch release-1.33 (git mirrors):
    how Go's encoding/json writes each field (`omitempty`, pointer or value, `,inline` embedding),
    matched to the protobuf field by its tag number, plus the named-slice wrapper types.

Usage:
  tools/gen-protobuf-schema.py [--k8s-pb DIR] [--k8s-openapi DIR] [--go-api GITDIR]
                               [--go-apimachinery GITDIR] [--go-ref REF] > kinds/src/protobuf/schema.rs
Defaults: the crates under ~/.cargo/registry/src/*/ and the mirrors under /work/.mirror/.
(If the crates are missing: `cargo fetch` in a scratch crate depending on k8s-pb = "=0.9.0".)
"""
import argparse
import glob
import os
import re
import subprocess
import sys
from collections import OrderedDict

HOME = os.path.expanduser("~")


def first_glob(pattern):
    hits = sorted(glob.glob(pattern))
    return hits[0] if hits else None


ap = argparse.ArgumentParser()
ap.add_argument("--k8s-pb", default=first_glob(f"{HOME}/.cargo/registry/src/*/k8s-pb-0.9.0/src"))
ap.add_argument(
    "--k8s-openapi", default=first_glob(f"{HOME}/.cargo/registry/src/*/k8s-openapi-0.29.0/src/v1_33")
)
ap.add_argument("--go-api", default="/work/.mirror/kubernetes+api/repo")
ap.add_argument("--go-apimachinery", default="/work/.mirror/kubernetes+apimachinery/repo")
ap.add_argument("--go-ref", default="release-1.33")
args = ap.parse_args()


def warn(msg):
    print(f"gen-protobuf-schema: {msg}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# k8s-pb: messages, tags, wire types
# ---------------------------------------------------------------------------------------------
PROST_ATTR = re.compile(r"#\[prost\((.*?)\)\]\s*pub (r#)?(\w+):\s*(.*?),\s*\n(?=\s*(?:///|#\[|$))", re.S)
STRUCT = re.compile(r"^pub struct (\w+) \{(.*?)\}$", re.S | re.M)


def resolve_path(module, rust_path):
    """`super::super::x::Y` seen from module ['api','core','v1'] -> ('x', 'Y')."""
    parts = rust_path.split("::")
    mod = list(module)
    while parts and parts[0] == "super":
        parts.pop(0)
        mod.pop()
    return ".".join(mod + parts)


def inner_type(ty, module):
    ty = re.sub(r"\s+", "", ty).replace(",>", ">")
    for wrapper in ("::core::option::Option<", "::prost::alloc::vec::Vec<"):
        if ty.startswith(wrapper):
            ty = ty[len(wrapper) : -1]
    m = re.match(r"::prost::alloc::collections::BTreeMap<(.*),(.*)>$", ty)
    if m:
        return ("map", inner_type(m.group(2), module))
    if ty.startswith("::prost") or ty in ("i32", "i64", "bool", "f64"):
        return None
    return resolve_path(module, ty)


messages = OrderedDict()  # "api.core.v1.Pod" -> {"module":..., "name":..., "fields":[...]}
for path in sorted(glob.glob(os.path.join(args.k8s_pb, "**/mod.rs"), recursive=True)):
    module = os.path.relpath(os.path.dirname(path), args.k8s_pb).split(os.sep)
    src = open(path).read()
    for sm in STRUCT.finditer(src):
        name, body = sm.group(1), sm.group(2) + "\n"
        fields = []
        for fm in PROST_ATTR.finditer(body):
            attr, rust, ty = fm.group(1), fm.group(3), fm.group(4)
            tag = int(re.search(r'tag = "(\d+)"', attr).group(1))
            kind = attr.split(",")[0].split("=")[0].strip()
            card = "repeated" if "repeated" in attr else "single"
            value = None
            if kind == "btree_map":
                card = "map"
                key, value = [s.strip() for s in re.search(r'btree_map = "(.*?)"', attr).group(1).split(",")]
                if key != "string":
                    raise SystemExit(f"{name}.{rust}: map key {key} is not supported")
                kind = value
            target = inner_type(ty, module)
            if isinstance(target, tuple):
                target = target[1]
            fields.append(
                {"rust": rust, "tag": tag, "kind": kind, "card": card, "target": target if kind == "message" else None}
            )
        messages[".".join(module + [name])] = {"module": module, "name": name, "fields": fields}

# ---------------------------------------------------------------------------------------------
# k8s-openapi: JSON names and resource kinds
# ---------------------------------------------------------------------------------------------
openapi = {}  # ("api/core/v1", "podspec") -> {"fields": {rust: json}, "gvk": (apiVersion, kind)}
for path in sorted(glob.glob(os.path.join(args.k8s_openapi, "**/*.rs"), recursive=True)):
    src = open(path).read()
    sm = re.search(r"pub struct (\w+) \{", src)
    if not sm:
        continue
    module = os.path.relpath(os.path.dirname(path), args.k8s_openapi).replace(os.sep, "/")
    fields = {}
    for fm in re.finditer(r'"([^"]+)" => Field::Key_(\w+),', src):
        fields.setdefault(fm.group(2).rstrip("_"), fm.group(1))
    optional = {m.group(1) for m in re.finditer(r"pub (\w+): Option<", src)}
    entry = {"fields": fields, "optional": optional, "gvk": None, "name": sm.group(1)}
    rm = re.search(r'impl crate::Resource for \w+ \{\s*const API_VERSION: &\'static str = "([^"]*)";'
                   r'.*?const KIND: &\'static str = "([^"]*)";', src, re.S)
    if rm:
        entry["gvk"] = (rm.group(1), rm.group(2))
    openapi[(module, sm.group(1).lower())] = entry


def openapi_entry(msg):
    return openapi.get(("/".join(msg["module"]), msg["name"].lower()))


def rust_key(rust):
    return rust.rstrip("_")


# ---------------------------------------------------------------------------------------------
# Go: encoding/json behaviour of each field
# ---------------------------------------------------------------------------------------------
def go_package(module):
    if module[0] == "api":
        return args.go_api, "/".join(module[1:])
    if module[0] == "apimachinery":
        return args.go_apimachinery, "/".join(module[1:])
    return None, None


go_cache = {}
GO_FIELD = re.compile(r"^\s*(\w+)\s+(\S+)\s+`([^`]*)`\s*$")
GO_EMBED = re.compile(r"^\s*(\*?[\w.]+)\s+`([^`]*)`\s*$")


def go_types(module):
    """Go structs of the package behind a k8s-pb module: lowercased name -> info."""
    key = tuple(module)
    if key in go_cache:
        return go_cache[key]
    repo, pkg = go_package(module)
    types = {}
    go_cache[key] = types
    if not repo or not os.path.isdir(repo):
        return types
    try:
        names = subprocess.run(
            ["git", "--git-dir", repo, "ls-tree", "--name-only", args.go_ref, pkg + "/"],
            check=True, capture_output=True, text=True,
        ).stdout.split()
    except subprocess.CalledProcessError:
        return types
    for name in names:
        if not name.endswith(".go") or name.endswith("_test.go") or "generated" in name:
            continue
        src = subprocess.run(
            ["git", "--git-dir", repo, "show", f"{args.go_ref}:{name}"], check=True, capture_output=True, text=True
        ).stdout
        for tm in re.finditer(r"^type (\w+) (\[\]string|map\[string\]string)\s*$", src, re.M):
            types[tm.group(1).lower()] = {"named": tm.group(2)}
        for tm in re.finditer(r"^type (\w+) struct \{\n(.*?)^\}", src, re.S | re.M):
            fields = {}
            for line in tm.group(2).split("\n"):
                if line.strip().startswith("//"):
                    continue
                fm = GO_FIELD.match(line)
                if fm:
                    gotype, tag = fm.group(2), fm.group(3)
                else:
                    em = GO_EMBED.match(line)
                    if not em:
                        continue
                    gotype, tag = em.group(1), em.group(2)
                pm = re.search(r'protobuf:"\w+,(\d+),', tag)
                jm = re.search(r'json:"([^"]*)"', tag)
                if not pm or not jm:
                    continue
                jparts = jm.group(1).split(",")
                fields[int(pm.group(1))] = {
                    "json": jparts[0],
                    "omitempty": "omitempty" in jparts[1:],
                    "inline": "inline" in jparts[1:],
                    "type": gotype,
                }
            types[tm.group(1).lower()] = {"fields": fields}
    return types


def go_struct(msg):
    return go_types(msg["module"]).get(msg["name"].lower())


# ---------------------------------------------------------------------------------------------
# Special types: Kubernetes messages with their own JSON form
# ---------------------------------------------------------------------------------------------
SPECIAL = {
    "apimachinery.pkg.api.resource.Quantity": "Quantity",
    "apimachinery.pkg.util.intstr.IntOrString": "IntOrString",
    "apimachinery.pkg.apis.meta.v1.Time": "Time",
    "apimachinery.pkg.apis.meta.v1.MicroTime": "MicroTime",
    "apimachinery.pkg.apis.meta.v1.Duration": "Duration",
    "apimachinery.pkg.runtime.RawExtension": "RawJson",
    "apimachinery.pkg.apis.meta.v1.FieldsV1": "RawJson",
}


def special_of(full):
    if full in SPECIAL:
        return SPECIAL[full]
    msg = messages.get(full)
    go = go_struct(msg) if msg else None
    if go and go.get("named") == "[]string":
        f = msg["fields"]
        if len(f) == 1 and f[0]["kind"] == "string" and f[0]["card"] == "repeated" and f[0]["tag"] == 1:
            return "StringList"
    return None


# ---------------------------------------------------------------------------------------------
# Kinds and the messages they reach
# ---------------------------------------------------------------------------------------------
kinds = []  # (apiVersion, kind, message)
for (module, _), entry in sorted(openapi.items()):
    if not entry["gvk"]:
        continue
    full = module.replace("/", ".") + "." + entry["name"]
    candidates = [k for k in messages if k.lower() == full.lower()]
    if not candidates or not module.startswith("api/"):
        continue
    kinds.append((entry["gvk"][0], entry["gvk"][1], candidates[0]))
group_versions = sorted({gv for gv, _, _ in kinds} | {"meta.k8s.io/v1"})
for gv in group_versions:
    # DeleteOptions is registered in every group version (metav1.AddToGroupVersion).
    kinds.append((gv, "DeleteOptions", "apimachinery.pkg.apis.meta.v1.DeleteOptions"))
kinds.sort()

order = []
seen = set()


def visit(full):
    if full in seen or special_of(full):
        return
    seen.add(full)
    order.append(full)
    for f in messages[full]["fields"]:
        if f["target"]:
            if f["target"] not in messages:
                raise SystemExit(f"{full}: unknown message {f['target']}")
            visit(f["target"])


for _, _, full in kinds:
    visit(full)
index = {full: i for i, full in enumerate(order)}

# ---------------------------------------------------------------------------------------------
# Per-field JSON behaviour
# ---------------------------------------------------------------------------------------------
stats = {"fields": 0, "json_from_go": 0, "json_guessed": 0, "presence_fallback": 0, "json_mismatch": 0}


def camel(rust):
    head, *rest = rust.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def rust_type(f):
    kind = f["kind"]
    if kind == "message":
        sp = special_of(f["target"])
        return f"T::{sp}" if sp else f"T::Message({index[f['target']]})"
    return {"string": "T::String", "bool": "T::Bool", "int32": "T::Int32", "int64": "T::Int64",
            "double": "T::Double", "bytes": "T::Bytes"}[kind]


def presence(f, go_field, entry):
    """How Go's encoding/json writes the field (see `Presence` in types.rs)."""
    if f["card"] != "single":
        return "P::NonEmpty"
    if go_field:
        gotype = go_field["type"]
        if gotype.startswith("*"):
            return "P::Present"
        if gotype.startswith("[]") or gotype.startswith("map["):
            return "P::NonEmpty"
        if f["kind"] == "message":
            return "P::Always"  # a struct value: omitempty never drops it
        return "P::NonZero" if go_field["omitempty"] else "P::Always"
    stats["presence_fallback"] += 1
    if entry and rust_key(f["rust"]) not in entry["optional"] and f["rust"] in entry["fields"]:
        return "P::Always"
    return "P::Present"


out_msgs = []
for full in order:
    msg = messages[full]
    entry = openapi_entry(msg)
    go = go_struct(msg) or {}
    rows = []
    for f in sorted(msg["fields"], key=lambda f: f["tag"]):
        stats["fields"] += 1
        go_field = go.get("fields", {}).get(f["tag"])
        inline = bool(go_field and go_field["inline"])
        json = None
        if entry:
            json = entry["fields"].get(rust_key(f["rust"]))
        if json is None and go_field and not inline:
            json = go_field["json"]
            stats["json_from_go"] += 1
        if json is None and not inline:
            json = camel(rust_key(f["rust"]))
            stats["json_guessed"] += 1
            warn(f"{full}.{f['rust']}: JSON name guessed as {json}")
        if go_field and json and go_field["json"] != json and not inline:
            stats["json_mismatch"] += 1
            warn(f"{full}.{f['rust']}: k8s-openapi says {json}, Go says {go_field['json']}")
        if json == "-":
            continue
        card = {"single": "C::One", "repeated": "C::Repeated", "map": "C::Map"}[f["card"]]
        pres = "P::Inline" if inline else presence(f, go_field, entry)
        rows.append(f'f({f["tag"]}, "{json or ""}", {rust_type(f)}, {card}, {pres})')
    out_msgs.append((full, rows))

# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------
print("//! The Kubernetes protobuf schema table: message fields (tag, JSON name, wire type, JSON presence)")
print("//! and the kinds a `k8s\\0` envelope may name.")
print("//!")
print("//! GENERATED by `tools/gen-protobuf-schema.py` -- do not edit. Regenerate with")
print("//! `python3 tools/gen-protobuf-schema.py > kinds/src/protobuf/schema.rs && cargo fmt --all`.")
print("//! Sources: k8s-pb 0.9.0 (tags, wire types), k8s-openapi 0.29.0 v1_33 (JSON names, kinds), Go")
print(f"//! types of kubernetes/api and kubernetes/apimachinery at {args.go_ref} (omitempty, pointers, inline).")
print(f"//! {len(order)} messages, {stats['fields']} fields, {len(kinds)} kinds.")
print()
print("use super::types::{Card as C, Message, Presence as P, Type as T, f};")
print()
print("/// Every message reachable from [`KINDS`], indexed by `Type::Message(i)`.")
print("pub(crate) static MESSAGES: &[Message] = &[")
for i, (full, rows) in enumerate(out_msgs):
    print(f"    // {i}")
    print("    Message {")
    print(f'        name: "k8s.io.{full}",')
    if rows:
        print("        fields: &[")
        for r in rows:
            print(f"            {r},")
        print("        ],")
    else:
        print("        fields: &[],")
    print("    },")
print("];")
print()
print("/// `(apiVersion, kind)` to the index of its message in [`MESSAGES`], sorted for binary search.")
print("pub(crate) static KINDS: &[(&str, &str, u16)] = &[")
for gv, kind, full in kinds:
    print(f'    ("{gv}", "{kind}", {index[full]}),')
print("];")
warn(f"stats: {stats}; messages {len(order)}; kinds {len(kinds)}")
