#!/usr/bin/env python3
"""Generate the tables the kinds crate reads from Kubernetes' Go types, in one run:
  * kinds/src/protobuf/schema.rs: the table the Kubernetes protobuf decoder walks;
  * kinds/src/patch/generated.rs (with --merge-out): the merge table, how strategic merge patch
    and server-side apply treat each field (patch tags, list/map/struct type markers, pointers,
    omitempty, list-map key defaults).

Inputs (all read-only, nothing is copied into the repository):
  * k8s-pb 0.9.0 (prost-generated structs in the local cargo registry): message names, field tags
    and wire types (`#[prost(string, optional, tag = "2")]`), embedded message types.
  * k8s-openapi 0.29.0 (`src/v1_33`): the JSON name of each field (`"hostIPC" => Field::Key_host_ipc`),
    and the (apiVersion, kind) of every top-level resource (`impl crate::Resource`).
  * the Go types of kubernetes/api and kubernetes/apimachinery at branch release-1.33 (git mirrors):
    how Go's encoding/json writes each field (`omitempty`, pointer or value, `,inline` embedding),
    matched to the protobuf field by its tag number, plus the named-slice wrapper types, and the
    `patchStrategy`/`patchMergeKey` tags and `// +listType=...`-style markers.

Usage:
  tools/gen-protobuf-schema.py [--k8s-pb DIR] [--k8s-openapi DIR] [--go-api GITDIR]
                               [--go-apimachinery GITDIR] [--go-ref REF]
                               --out kinds/src/protobuf/schema.rs --merge-out kinds/src/patch/generated.rs
  then `cargo fmt --all`. `--check` regenerates both into a scratch directory and fails if the
  checked-in files differ (the tables are not current with the generator and its inputs).
Defaults: the crates under ~/.cargo/registry/src/*/ and the mirrors under /work/.mirror/.
(If the crates are missing: `cargo fetch` in a scratch crate depending on k8s-pb = "=0.9.0".)
The tests check that both checked-in tables name the same inputs (`SOURCES`), i.e. were written by
one run.
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
ap.add_argument("--out", help="the protobuf table (default: standard output)")
ap.add_argument("--merge-out", help="also write the merge table (kinds/src/patch/generated.rs) here")
ap.add_argument("--check", action="store_true", help="fail if the checked-in tables are not current")
args = ap.parse_args()
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKED_IN = {
    "out": os.path.join(REPO, "kinds/src/protobuf/schema.rs"),
    "merge_out": os.path.join(REPO, "kinds/src/patch/generated.rs"),
}
if args.check:
    import tempfile

    scratch = tempfile.mkdtemp(prefix="gen-schema-")
    args.out = os.path.join(scratch, "schema.rs")
    args.merge_out = os.path.join(scratch, "generated.rs")


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
            markers = []  # the `// +key=value` lines above the next field
            for line in tm.group(2).split("\n"):
                if line.strip().startswith("//"):
                    mm = re.match(r"\s*//\s*\+([\w.]+)(?:=(.*))?$", line)
                    if mm:
                        markers.append((mm.group(1), (mm.group(2) or "").strip()))
                    continue
                field_markers, markers = markers, []
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
                strategy = re.search(r'patchStrategy:"([^"]*)"', tag)
                merge_key = re.search(r'patchMergeKey:"([^"]*)"', tag)
                fields[int(pm.group(1))] = {
                    "json": jparts[0],
                    "omitempty": "omitempty" in jparts[1:],
                    "inline": "inline" in jparts[1:],
                    "type": gotype,
                    "patch_strategy": strategy.group(1).split(",") if strategy else [],
                    "patch_merge_key": merge_key.group(1) if merge_key else None,
                    "markers": field_markers,
                }
            # `// +structType=atomic` in the comment block right above the type.
            head = src[: tm.start()].rstrip("\n").split("\n")
            type_markers = []
            while head and head[-1].startswith("//"):
                mm = re.match(r"//\s*\+([\w.]+)(?:=(.*))?$", head.pop())
                if mm:
                    type_markers.append((mm.group(1), (mm.group(2) or "").strip()))
            types[tm.group(1).lower()] = {"fields": fields, "markers": type_markers}
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
json_names = {}  # (message, tag) -> JSON name, for the merge table
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
        json_names[(full, f["tag"])] = json
        card = {"single": "C::One", "repeated": "C::Repeated", "map": "C::Map"}[f["card"]]
        pres = "P::Inline" if inline else presence(f, go_field, entry)
        rows.append(f'f({f["tag"]}, "{json or ""}", {rust_type(f)}, {card}, {pres})')
    out_msgs.append((full, rows))

# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------
out = open(args.out, "w") if args.out else sys.stdout
SOURCES = (
    f"k8s-pb 0.9.0, k8s-openapi 0.29.0 v1_33, kubernetes/api and kubernetes/apimachinery at {args.go_ref}"
)


def emit(line=""):
    print(line, file=out)


emit("//! The Kubernetes protobuf schema table: message fields (tag, JSON name, wire type, JSON presence)")
emit("//! and the kinds a `k8s\\0` envelope may name.")
emit("//!")
emit("//! GENERATED by `tools/gen-protobuf-schema.py` -- do not edit. Regenerate with")
emit("//! `python3 tools/gen-protobuf-schema.py --out kinds/src/protobuf/schema.rs --merge-out")
emit("//! kinds/src/patch/generated.rs && cargo fmt --all`.")
emit("//! Sources: k8s-pb 0.9.0 (tags, wire types), k8s-openapi 0.29.0 v1_33 (JSON names, kinds), Go")
emit(f"//! types of kubernetes/api and kubernetes/apimachinery at {args.go_ref} (omitempty, pointers, inline).")
emit(f"//! {len(order)} messages, {stats['fields']} fields, {len(kinds)} kinds.")
emit()
emit("use super::types::{Card as C, Message, Presence as P, Type as T, f};")
emit()
emit("/// The inputs of the run that wrote this table (the merge table names the same).")
emit(f'pub const SOURCES: &str = "{SOURCES}";')
emit()
emit("/// Every message reachable from [`KINDS`], indexed by `Type::Message(i)`.")
emit("pub(crate) static MESSAGES: &[Message] = &[")
for i, (full, rows) in enumerate(out_msgs):
    emit(f"    // {i}")
    emit("    Message {")
    emit(f'        name: "k8s.io.{full}",')
    if rows:
        emit("        fields: &[")
        for r in rows:
            emit(f"            {r},")
        emit("        ],")
    else:
        emit("        fields: &[],")
    emit("    },")
emit("];")
emit()
emit("/// `(apiVersion, kind)` to the index of its message in [`MESSAGES`], sorted for binary search.")
emit("pub(crate) static KINDS: &[(&str, &str, u16)] = &[")
for gv, kind, full in kinds:
    emit(f'    ("{gv}", "{kind}", {index[full]}),')
emit("];")
warn(f"stats: {stats}; messages {len(order)}; kinds {len(kinds)}")

if args.out:
    out.close()

# ---------------------------------------------------------------------------------------------
# The merge table: how strategic merge patch and server-side apply treat each field
# ---------------------------------------------------------------------------------------------
# From the same Go types: the `patchStrategy`/`patchMergeKey` tags, the `+listType`,
# `+listMapKey`, `+mapType` and `+structType` markers, `+default` of list-map keys, pointers
# and `omitempty`. A list without `+listType` is what kube-openapi's schemaconv makes of it: a
# map-list by its merge key, a set when merged without a key, atomic otherwise.
if not args.merge_out:
    raise SystemExit(0)


def marker(markers, key):
    values = [v for k, v in markers if k == key]
    return values


def go_field_of(full, tag):
    go = go_struct(messages[full]) or {}
    return go.get("fields", {}).get(tag)


def key_default(item_full, key):
    """The `+default` of a list-map key's field in the item message, if it is a string."""
    import json as jsonlib

    for f in messages[item_full]["fields"]:
        if json_names.get((item_full, f["tag"])) != key:
            continue
        gf = go_field_of(item_full, f["tag"])
        for v in marker(gf["markers"] if gf else [], "default"):
            try:
                d = jsonlib.loads(v)
            except ValueError:
                continue
            if isinstance(d, str):
                return d
    return None


merge_types = {}  # message -> list of field rows (None while being computed)
merge_stats = {"types": 0, "fields": 0}


def listed_fields(full):
    """The fields of `full` whose merge behaviour is not the default, as Rust `Field`s."""
    if full in merge_types:
        if merge_types[full] is None:
            raise SystemExit(f"{full}: recursive type")
        return merge_types[full]
    merge_types[full] = None
    rows = []
    for f in sorted(messages[full]["fields"], key=lambda f: f["tag"]):
        gf = go_field_of(full, f["tag"]) or {
            "type": "", "omitempty": True, "inline": False, "patch_strategy": [],
            "patch_merge_key": None, "markers": [],
        }
        json = json_names.get((full, f["tag"]))
        target = f["target"] if f["kind"] == "message" and not special_of(f["target"]) else None
        if gf["inline"] and target:
            rows.extend(listed_fields(target))
            continue
        if not json or json == "-":
            continue
        attrs = []
        child = None
        if target and f["card"] != "map":
            child = listed_fields(target)
        strategy = gf["patch_strategy"]
        key = gf["patch_merge_key"]
        if f["card"] == "repeated":
            if "merge" in strategy:
                attrs.append(f'merge_key: Some("{key or ""}")')
            if "retainKeys" in strategy:
                attrs.append("retain_keys: true")
            list_type = (marker(gf["markers"], "listType") or [None])[0]
            keys = marker(gf["markers"], "listMapKey")
            if list_type is None and "merge" in strategy:
                list_type, keys = ("map", [key]) if key else ("set", [])
            if list_type == "map":
                pairs = ", ".join(
                    f'("{k}", {f"Some({chr(34)}{d}{chr(34)})" if (d := key_default(target, k)) else "None"})'
                    for k in keys
                )
                attrs.append(f"list_type: ListType::Map(&[{pairs}])")
            elif list_type == "set":
                attrs.append("list_type: ListType::Set")
            if list_type in ("map", "set") and (gf["omitempty"] or gf["type"].startswith("*")):
                attrs.append("optional: true")
        elif f["card"] == "map":
            if "atomic" in marker(gf["markers"], "mapType"):
                attrs.append("atomic_map: true")
            attrs.append("is_map: true")
        elif target:
            tm = (go_struct(messages[target]) or {}).get("markers", [])
            if "atomic" in marker(tm, "structType") + marker(gf["markers"], "structType") + marker(
                gf["markers"], "mapType"
            ):
                attrs.append("atomic_map: true")
                child = None
            elif gf["type"].startswith("*"):
                attrs.append("optional: true")
        if "merge" in strategy and f["card"] != "repeated":
            attrs.append(f'merge_key: Some("{key or ""}")')
        if "retainKeys" in strategy and f["card"] != "repeated":
            attrs.append("retain_keys: true")
        if child:
            attrs.append(f"ty: Some(&{rust_name(target)})")
        if attrs:
            merge_stats["fields"] += 1
            rows.append(f'Field {{ name: "{json}", {", ".join(attrs)}, ..Field::DEFAULT }}')
    merge_types[full] = rows
    return rows


def rust_name(full):
    parts = full.split(".")
    if parts[0] == "api":
        parts = parts[1:]
    elif parts[:3] == ["apimachinery", "pkg", "apis"]:
        parts = parts[3:]
    else:
        parts = parts[1:]
    *module, name = parts
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).upper()
    return "_".join(p.upper() for p in module) + "_" + snake


merge_kinds = [(gv, kind, full) for gv, kind, full in kinds if kind != "DeleteOptions"]
for _, _, full in merge_kinds:
    listed_fields(full)
emitted = [full for full in merge_types if merge_types[full] or any(full == k for _, _, k in merge_kinds)]
merge_stats["types"] = len(emitted)

with open(args.merge_out, "w") as m:
    w = lambda line="": print(line, file=m)
    w("//! The merge table: for each field of the built-in kinds whose behaviour is not the default,")
    w("//! how strategic merge patch merges it and how server-side apply tracks it (see `schema.rs`).")
    w("//!")
    w("//! GENERATED by `tools/gen-protobuf-schema.py` -- do not edit; regenerate both tables with it")
    w("//! (see its header). From the Go types' `patchStrategy`/`patchMergeKey` tags and")
    w("//! `+listType`/`+listMapKey`/`+mapType`/`+structType`/`+default` markers, pointers and `omitempty`.")
    w(f"//! {merge_stats['types']} types, {merge_stats['fields']} listed fields, {len(merge_kinds)} kinds.")
    w()
    w("use super::schema::{Field, ListType, Type};")
    w()
    w("/// The inputs of the run that wrote this table (the protobuf table names the same).")
    w(f'pub const SOURCES: &str = "{SOURCES}";')
    for full in emitted:
        w()
        w(f"/// `{full}`.")
        w(f"pub static {rust_name(full)}: Type = Type {{")
        rows = merge_types[full]
        if rows:
            w("    fields: &[")
            for r in rows:
                w(f"        {r},")
            w("    ],")
        else:
            w("    fields: &[],")
        w("};")
    w()
    w("/// `(apiVersion, kind)` to its type, sorted for binary search.")
    w("pub static KINDS: &[(&str, &str, &Type)] = &[")
    for gv, kind, full in merge_kinds:
        w(f'    ("{gv}", "{kind}", &{rust_name(full)}),')
    w("];")
warn(f"merge table: {merge_stats}")

if args.check:
    stale = []
    for key, checked_in in CHECKED_IN.items():
        fresh = getattr(args, key)
        subprocess.run(["rustfmt", "--edition", "2024", fresh], check=True)
        if open(fresh).read() != open(checked_in).read():
            stale.append(os.path.relpath(checked_in, REPO))
    if stale:
        raise SystemExit(f"not current: {', '.join(stale)} (regenerate, see the header)")
    warn("both tables are current")
