"""Numeric formats of DeepSeek-V4.1 (spec §4.9) in plain torch.

Three kinds of function, all on float32 tensors:

* ``fake_*``: quantize -> dequantize, returning the float values the stored form
  holds (bit-exact with the reference's rules: scales from the fp32 bits, elements
  round to nearest even, clamp before rounding). No gradient of their own.
* ``ste``: wraps a fake quantizer as a straight-through estimator: the forward
  value is exactly the quantized value, the gradient passes through unchanged.
* ``encode_*`` / ``decode_*``: the stored bytes of the checkpoint (e4m3 codes,
  E8M0 exponents, packed e2m1 nibbles with element 2k in the low nibble).

Rules (spec §4.9):
  FP8 act/KV/rows, UE8M0 per 32:  s = 2^ceil(log2(max(amax, 1e-4) * fl(1/448)))
  FP8 weight, 32x32 tile:          the same rule over the tile
  FP4 E8M0 per 32 (MXFP4):         s = 2^ceil(log2(max(amax, 6*2^-126) * fl(1/6)))
  FP4 E4M3 per 16 (compressed KV): s = e4m3(max(amax, 6*2^-9) / 6)
  elements: e4m3_rne(clamp(x/s, +-448)) or e2m1_rne(clamp(x/s, +-6)), times s.
"""

import torch

FP8_MAX = 448.0
FP4_MAX = 6.0
_INV448 = torch.tensor(1.0 / 448.0, dtype=torch.float32).item()  # fl(1/448)
_INV6 = torch.tensor(1.0 / 6.0, dtype=torch.float32).item()  # fl(1/6)
_FP4_E8M0_FLOOR = 6.0 * 2.0**-126
_FP4_E4M3_FLOOR = 6.0 * 2.0**-9
# e2m1 magnitudes by code 0..7; code bit 3 is the sign
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def ceil_pow2(x: torch.Tensor) -> torch.Tensor:
    """Returns 2^ceil(log2(x)) exactly, for positive finite fp32 x."""
    m, e = torch.frexp(x)  # x = m * 2^e, m in [0.5, 1)
    e = torch.where(m == 0.5, e - 1, e)
    return torch.ldexp(torch.ones_like(x), e)


def e4m3_round(x: torch.Tensor) -> torch.Tensor:
    """Rounds to the nearest e4m3fn value (ties to even); REQUIRES |x| <= 448."""
    return x.to(torch.float8_e4m3fn).to(torch.float32)


def e2m1_round(x: torch.Tensor) -> torch.Tensor:
    """Rounds to the e2m1 grid {0, .5, 1, 1.5, 2, 3, 4, 6} (ties to the even code);
    REQUIRES |x| <= 6. The grid steps by 0.5 below 2, by 1 to 4, by 2 to 6, and in each
    range round-half-even of x / step picks the even code at ties."""
    a = x.abs()
    r = torch.where(a < 2.0, torch.round(a * 2.0) * 0.5,
                    torch.where(a < 4.0, torch.round(a), torch.round(a * 0.5) * 2.0))
    return torch.copysign(r, x)


def _blocks(x: torch.Tensor, block: int) -> torch.Tensor:
    assert x.shape[-1] % block == 0, (tuple(x.shape), block)
    return x.reshape(*x.shape[:-1], x.shape[-1] // block, block)


def fp8_scale(amax: torch.Tensor) -> torch.Tensor:
    return ceil_pow2(amax.clamp_min(1e-4) * _INV448)


def fake_fp8(x: torch.Tensor, block: int = 32) -> torch.Tensor:
    """FP8 e4m3 with a UE8M0 scale per `block` elements of the last dim (activations,
    window KV, Engram rows)."""
    xb = _blocks(x.float(), block)
    s = fp8_scale(xb.abs().amax(-1, keepdim=True))
    return (e4m3_round((xb / s).clamp(-FP8_MAX, FP8_MAX)) * s).reshape(x.shape)


def fake_fp4_e8m0(x: torch.Tensor, block: int = 32) -> torch.Tensor:
    """MXFP4: e2m1 with an E8M0 scale per `block` (index Q/K, routed-expert weights)."""
    xb = _blocks(x.float(), block)
    s = ceil_pow2(xb.abs().amax(-1, keepdim=True).clamp_min(_FP4_E8M0_FLOOR) * _INV6)
    return (e2m1_round((xb / s).clamp(-FP4_MAX, FP4_MAX)) * s).reshape(x.shape)


def fake_fp4_e4m3(x: torch.Tensor, block: int = 16) -> torch.Tensor:
    """e2m1 with an E4M3 scale per `block`, no global scale (main compressed KV)."""
    xb = _blocks(x.float(), block)
    s = e4m3_round(xb.abs().amax(-1, keepdim=True).clamp_min(_FP4_E4M3_FLOOR) / 6.0)
    return (e2m1_round((xb / s).clamp(-FP4_MAX, FP4_MAX)) * s).reshape(x.shape)


def _tile_view(w: torch.Tensor, block: int):
    rows, cols = w.shape
    pr, pc = -rows % block, -cols % block
    wp = torch.nn.functional.pad(w.float(), (0, pc, 0, pr))
    tiles = wp.reshape((rows + pr) // block, block, (cols + pc) // block, block)
    return tiles, rows, cols


def fp8_tile_scales(w: torch.Tensor, block: int = 32) -> torch.Tensor:
    """The UE8M0 scale of every block x block tile of a 2-D weight. [ceil(r/b), ceil(c/b)]"""
    tiles, _, _ = _tile_view(w, block)
    return fp8_scale(tiles.abs().amax(dim=(1, 3)))


def fake_fp8_weight(w: torch.Tensor, block: int = 32) -> torch.Tensor:
    """FP8 e4m3 weight with one UE8M0 scale per block x block tile (zero-padded edges)."""
    tiles, rows, cols = _tile_view(w, block)
    s = fp8_scale(tiles.abs().amax(dim=(1, 3), keepdim=True))
    q = e4m3_round((tiles / s).clamp(-FP8_MAX, FP8_MAX)) * s
    return q.reshape(tiles.shape[0] * block, tiles.shape[2] * block)[:rows, :cols]


def round_bf16(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).to(torch.float32)


class _Ste(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, fn):
        with torch.no_grad():
            return fn(x)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def ste(x: torch.Tensor, fn) -> torch.Tensor:
    """fn(x) in the forward, identity in the backward (straight-through estimator)."""
    if not x.requires_grad:
        with torch.no_grad():
            return fn(x)
    return _Ste.apply(x, fn)


# ---- stored bytes -------------------------------------------------------------------------


def e8m0_encode(s: torch.Tensor) -> torch.Tensor:
    """Power-of-two fp32 scales -> E8M0 codes (uint8, value 2^(code-127))."""
    _, e = torch.frexp(s)
    return (e - 1 + 127).clamp(0, 254).to(torch.uint8)


def e8m0_decode(code: torch.Tensor) -> torch.Tensor:
    return torch.ldexp(torch.ones(code.shape), code.to(torch.int32) - 127)


def e4m3_decode(code: torch.Tensor) -> torch.Tensor:
    return code.contiguous().view(torch.float8_e4m3fn).to(torch.float32)


def e4m3_encode(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().to(torch.float8_e4m3fn).view(torch.uint8)


def encode_fp8_weight(w: torch.Tensor, block: int = 32):
    """Returns (e4m3 codes uint8 [r, c], E8M0 codes uint8 [ceil(r/b), ceil(c/b)])."""
    s = fp8_tile_scales(w, block)
    rows, cols = w.shape
    sf = s.repeat_interleave(block, 0).repeat_interleave(block, 1)[:rows, :cols]
    codes = e4m3_encode((w.float() / sf).clamp(-FP8_MAX, FP8_MAX))
    return codes, e8m0_encode(s)


def decode_fp8_weight(codes: torch.Tensor, scales: torch.Tensor, block: int = 32) -> torch.Tensor:
    rows, cols = codes.shape
    s = e8m0_decode(scales).repeat_interleave(block, 0).repeat_interleave(block, 1)[:rows, :cols]
    return e4m3_decode(codes) * s


def encode_fp8_rows(w: torch.Tensor, block: int = 32):
    """FP8 rows with a UE8M0 scale per `block` columns (Engram tables)."""
    wb = _blocks(w.float(), block)
    s = fp8_scale(wb.abs().amax(-1, keepdim=True))
    codes = e4m3_encode((wb / s).clamp(-FP8_MAX, FP8_MAX)).reshape(w.shape)
    return codes, e8m0_encode(s.squeeze(-1))


def decode_fp8_rows(codes: torch.Tensor, scales: torch.Tensor, block: int = 32) -> torch.Tensor:
    vals = _blocks(e4m3_decode(codes), block) * e8m0_decode(scales).unsqueeze(-1)
    return vals.reshape(codes.shape)


_E2M1_TABLE = torch.tensor(E2M1_VALUES + tuple(-v for v in E2M1_VALUES), dtype=torch.float32)


def encode_mxfp4(w: torch.Tensor, block: int = 32):
    """MXFP4 weight [r, c] -> (packed uint8 [r, c/2], E8M0 codes uint8 [r, c/block])."""
    wb = _blocks(w.float(), block)
    s = ceil_pow2(wb.abs().amax(-1, keepdim=True).clamp_min(_FP4_E8M0_FLOOR) * _INV6)
    q = e2m1_round((wb / s).clamp(-FP4_MAX, FP4_MAX)).reshape(w.shape)
    mag = torch.bucketize(q.abs(), torch.tensor(E2M1_VALUES))  # exact grid values -> index
    code = (mag | torch.where(q < 0, 8, 0)).to(torch.uint8)
    packed = code[:, 0::2] | (code[:, 1::2] << 4)
    return packed, e8m0_encode(s.squeeze(-1))


def decode_mxfp4(packed: torch.Tensor, scales: torch.Tensor, block: int = 32) -> torch.Tensor:
    p = packed.view(torch.uint8).to(torch.int64)
    codes = torch.stack([p & 0xF, p >> 4], dim=-1).reshape(p.shape[0], p.shape[1] * 2)
    vals = _blocks(_E2M1_TABLE[codes], block) * e8m0_decode(scales).unsqueeze(-1)
    return vals.reshape(codes.shape)
