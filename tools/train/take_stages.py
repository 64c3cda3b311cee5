"""Takes the DSpark stages (`mtp.*` tensors) of a retrained export into a checkpoint whose
backbone stays byte for byte, after checking that the export's backbone holds the same
values (re-encoding a dequantized checkpoint is value-exact, not byte-exact: a 32 x 32
block may come back with half the scale and its codes one binade up).

    python tools/train/take_stages.py CHECKPOINT.safetensors EXPORT.safetensors OUT.safetensors

Both files must declare the same tensors (names, dtypes, shapes). numpy only.
"""

import json
import struct
import sys

import numpy as np

FP4 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6])


def read(path):
    """(file bytes, header, data start)."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    return data, json.loads(data[8:8 + n]), 8 + n


def raw(file, name):
    data, header, base = file
    o0, o1 = header[name]["data_offsets"]
    return np.frombuffer(data[base + o0:base + o1], np.uint8)


def e4m3(u):
    u = u.astype(np.int64)
    sign = np.where(u & 0x80, -1.0, 1.0)
    e, m = (u >> 3) & 0xF, u & 7
    return sign * np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7))


def value(file, name):
    """The float64 values of a stored weight `name` (.weight codes + .scale UE8M0)."""
    header = file[1]
    w, sc = raw(file, name + ".weight"), raw(file, name + ".scale")
    shape, sshape = header[name + ".weight"]["shape"], header[name + ".scale"]["shape"]
    scale = (2.0 ** (sc.astype(np.int64) - 127)).reshape(sshape)
    if header[name + ".weight"]["dtype"] == "F8_E4M3":
        v = e4m3(w).reshape(shape)
        r, k = shape
        if sshape == [(r + 31) // 32, (k + 31) // 32]:  # 32 x 32 tiles
            return v * np.repeat(np.repeat(scale, 32, 0), 32, 1)[:r, :k]
        return v * np.repeat(scale, k // sshape[1], 1)  # a scale per row block
    v = np.stack([FP4[w & 0xF], FP4[w >> 4]], -1).reshape(shape[0], shape[1] * 2)  # MXFP4
    return v * np.repeat(scale, 32, 1)


def main(argv):
    if len(argv) != 4:
        sys.exit(__doc__)
    ckpt, export = read(argv[1]), read(argv[2])
    names = [k for k in ckpt[1] if k != "__metadata__"]
    for k in names:
        if k not in export[1] or any(ckpt[1][k][f] != export[1][k][f] for f in ("dtype", "shape")):
            sys.exit(f"{k}: not declared alike in both files")
    stored = sorted({k.rsplit(".", 1)[0] for k in names if k.endswith(".scale")})
    stored_parts = {n + s for n in stored for s in (".weight", ".scale")}
    differ = [n for n in stored if not n.startswith("mtp.") and
              not np.array_equal(value(ckpt, n), value(export, n))]
    differ += [k for k in names if k not in stored_parts and not k.startswith("mtp.") and
               not np.array_equal(raw(ckpt, k), raw(export, k))]
    if differ:
        sys.exit(f"the backbone differs in value: {differ[:5]} ({len(differ)})")
    out = bytearray(ckpt[0])
    taken = 0
    for k in names:
        if k.startswith("mtp."):
            o0, o1 = ckpt[1][k]["data_offsets"]
            new = raw(export, k).tobytes()
            taken += out[ckpt[2] + o0:ckpt[2] + o1] != new
            out[ckpt[2] + o0:ckpt[2] + o1] = new
    with open(argv[3], "wb") as f:
        f.write(out)
    print(f"{argv[3]}: {taken} of {sum(k.startswith('mtp.') for k in names)} stage tensors "
          f"taken from {argv[2]}; the backbone's {len(names) - sum(k.startswith('mtp.') for k in names)} "
          "kept, equal in value to the export's")


if __name__ == "__main__":
    main(sys.argv)
