"""Minimal safetensors reader/writer (8-byte little-endian header length, JSON header,
raw little-endian data), written to match weir's writer byte for byte
(worker/model/safetensors_writer.cc: compact JSON with sorted keys, padded with spaces
to a multiple of 8, tensors in the given order). Tensors are handled as raw bytes plus
the format's dtype name ("F32", "BF16", "F8_E4M3", "F8_E8M0", "I8", "I32", "I64"), so
no torch float8/float4 support is needed.
"""

import json
import struct

import torch

DTYPE_SIZE = {"F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1, "F8_E8M0": 1, "I8": 1, "U8": 1,
              "I32": 4, "I64": 8}


class RawTensor:
    """dtype name, shape, and the bytes as a uint8 torch tensor."""

    def __init__(self, dtype: str, shape, data: torch.Tensor):
        self.dtype, self.shape, self.data = dtype, list(shape), data

    def to_torch(self) -> torch.Tensor:
        """Decodes F32/BF16/I32/I64/I8 into a tensor of that type ([shape])."""
        torch_dtype = {"F32": torch.float32, "BF16": torch.bfloat16, "I32": torch.int32,
                       "I64": torch.int64, "I8": torch.int8, "U8": torch.uint8,
                       "F8_E4M3": torch.uint8, "F8_E8M0": torch.uint8}[self.dtype]
        return self.data.view(torch_dtype).reshape(self.shape)


def read_safetensors(path: str):
    """Returns ({name: RawTensor}, metadata dict)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8: 8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    base = 8 + n
    whole = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
    out = {}
    for name, info in header.items():
        a, b = info["data_offsets"]
        out[name] = RawTensor(info["dtype"], info["shape"], whole[base + a: base + b].clone())
    return out, meta


def raw_from_torch(t: torch.Tensor, dtype: str) -> RawTensor:
    """Wraps a tensor whose element type already matches `dtype` (uint8 codes for F8_*)."""
    t = t.detach().contiguous().cpu()
    return RawTensor(dtype, list(t.shape), t.view(torch.uint8).reshape(-1))


def safetensors_header(tensors: list, metadata: dict) -> bytes:
    """tensors: [(name, RawTensor)] in file order."""
    root, offset = {}, 0
    if metadata:
        root["__metadata__"] = dict(metadata)
    for name, t in tensors:
        nbytes = DTYPE_SIZE[t.dtype]
        for d in t.shape:
            nbytes *= d
        assert nbytes == t.data.numel(), (name, t.shape, t.data.numel())
        root[name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(root, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text


def write_safetensors(path: str, tensors: list, metadata=None):
    """tensors: [(name, RawTensor)] in file order. Writes path atomically (path.tmp)."""
    import os
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(safetensors_header(tensors, metadata or {}))
        for _, t in tensors:
            f.write(t.data.numpy().tobytes())
    os.replace(tmp, path)
