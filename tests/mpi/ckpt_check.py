#!/usr/bin/env python3
"""Reads a dmuon checkpoint and its export with the reference safetensors library.

    ckpt_check.py CKPT_DIR EXPORT.safetensors

Every rank file of the checkpoint is loaded with safetensors.numpy; the master
weights of each parameter are put together from its "<param>/master/<lo>-<hi>"
tensors as the manifest lists them.  The export must hold every parameter with
the manifest's shape and dtype, and values equal to those masters: F32 bit for
bit, F16 as numpy's float32 -> float16 rounding, BF16 (which numpy cannot hold:
read as raw 16-bit words at the header's data_offsets) as round-to-nearest-even
of the float32 bits.  Prints one line and exits non-zero on any difference.
"""
import json
import os
import struct
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file


def main():
    ckpt, export = sys.argv[1], sys.argv[2]
    with open(os.path.join(ckpt, "manifest.json")) as f:
        manifest = json.load(f)
    files = {e["name"]: load_file(os.path.join(ckpt, e["name"])) for e in manifest["files"]}
    with open(export, "rb") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(hlen))
        data = f.read()
    checked = wrong = 0
    with safe_open(export, framework="numpy") as st:
        if sorted(st.keys()) != sorted(p["name"] for p in manifest["params"]):
            print("python-safetensors: tensor names differ:", sorted(st.keys()))
            return 1
        for p in manifest["params"]:
            name, shape = p["name"], list(p["shape"])
            n = int(np.prod(shape)) if shape else 1
            master = np.zeros(n, np.float32)
            covered = np.zeros(n, bool)
            for q in manifest["pieces"]:
                if q["param"] == name and q["kind"] == "master":
                    t = files[q["file"]]["%s/master/%d-%d" % (name, q["lo"], q["hi"])]
                    master[q["lo"]:q["hi"]] = t
                    covered[q["lo"]:q["hi"]] = True
            sl = st.get_slice(name)
            want_dtype = {"f32": "F32", "bf16": "BF16", "f16": "F16"}[p["dtype"]]
            if sl.get_dtype() != want_dtype or list(sl.get_shape()) != shape or not covered.all():
                print("python-safetensors: %s: %s %s, expected %s %s (master covered: %s)"
                      % (name, sl.get_dtype(), sl.get_shape(), want_dtype, shape, covered.all()))
                wrong += 1
                continue
            if want_dtype == "F32":
                got = st.get_tensor(name).reshape(-1).view(np.uint32)
                want = master.view(np.uint32)
            elif want_dtype == "F16":
                got = st.get_tensor(name).reshape(-1).view(np.uint16)
                with np.errstate(over="ignore"):   # overflow to infinity is expected
                    want = master.astype(np.float16).view(np.uint16)
            else:
                b0, b1 = header[name]["data_offsets"]
                got = np.frombuffer(data[b0:b1], dtype="<u2")
                u = master.view(np.uint32).astype(np.uint64)
                want = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
            checked += n
            wrong += int((got != want).sum())
    print("python-safetensors: %d elements of %d tensors checked, %d wrong"
          % (checked, len(manifest["params"]), wrong))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
