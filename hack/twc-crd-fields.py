#!/usr/bin/env python3
"""Lists every field of TWC's CRDs, one `Kind path` per line, for the compatibility test
(crates/api/tests/twc_fields.rs). Usage: hack/twc-crd-fields.py CRD.yaml... > FILE

The input is TWC's published CRDs (helm/temporal-worker-controller-crds/templates/*.yaml of
temporalio/temporal-worker-controller). Array items are written `[]`; a PodTemplateSpec
(a `template` with `metadata` and `spec.containers`) and an object that keeps unknown fields
are listed but not descended into: below them nothing is pruned."""
import sys

import yaml


def is_pod_template(schema):
    props = schema.get("properties", {})
    spec = props.get("spec", {}).get("properties", {})
    return "metadata" in props and "containers" in spec


def walk(schema, path, out):
    out.append(path)
    if schema.get("x-kubernetes-preserve-unknown-fields") or is_pod_template(schema):
        return
    if schema.get("type") == "array" and "items" in schema:
        walk(schema["items"], path + "[]", out)
        return
    for name, sub in sorted(schema.get("properties", {}).items()):
        walk(sub, f"{path}.{name}" if path else name, out)


def main():
    lines = []
    for f in sys.argv[1:]:
        for doc in yaml.safe_load_all(open(f, encoding="utf-8")):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            kind = doc["spec"]["names"]["kind"]
            for version in doc["spec"]["versions"]:
                if not version.get("served", True):
                    continue
                root = version["schema"]["openAPIV3Schema"]["properties"]
                for top in ("spec", "status"):
                    if top in root:
                        out = []
                        walk(root[top], top, out)
                        lines += [f"{kind} {version['name']} {p}" for p in out]
    for line in sorted(set(lines)):
        print(line)


if __name__ == "__main__":
    main()
