#!/usr/bin/env python3
"""Writes a one-layer image archive in `docker save` format from a directory,
offline (no registry, no daemon). `docker load`, `ctr images import` and
`podman load` take it.

    image_archive.py --rootfs DIR --tag REPO:TAG [--cmd ARG]... OUT.tar
"""
import argparse
import hashlib
import io
import json
import tarfile
from pathlib import Path


def write_image_archive(rootfs, tag, cmd, out, env=("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)):
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as t:
        t.add(str(rootfs), arcname=".")
    layer_bytes = layer.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "config": {"Cmd": list(cmd), "Env": list(env)},
                         "rootfs": {"type": "layers", "diff_ids": [diff_id]}}).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [tag], "Layers": ["layer/layer.tar"]}]).encode()
    with tarfile.open(out, "w") as t:
        for name, data in [("layer/layer.tar", layer_bytes), (config_name, config), ("manifest.json", manifest)]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return Path(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rootfs", required=True)
    ap.add_argument("--tag", required=True)
    ap.add_argument("--cmd", action="append", default=[], help="one argument of the image command (repeat)")
    ap.add_argument("out")
    a = ap.parse_args()
    write_image_archive(a.rootfs, a.tag, a.cmd, a.out)
    print(f"wrote {a.out} ({a.tag})")


if __name__ == "__main__":
    main()
