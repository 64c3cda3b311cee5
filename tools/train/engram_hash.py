"""Engram n-gram hashing of DeepSeek-V4.1 (spec §4.7 steps 2-4), over full sequences.

`EngramHasher(cfg, token_map)(ids)` returns the table row ids of every position:
[B, S, n_engram_layers, (max_ngram - 1) * n_heads], offsets included. Column order is
n-gram size 2..max (outer) x head (inner), as the reference lays them out.
"""

import numpy as np
import torch

from v41_config import V41Config


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    for p in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37):
        if n % p == 0:
            return n == p
    d, s = n - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for a in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37):  # deterministic below 3.3e24
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def engram_primes(c: V41Config) -> list:
    """[layer][ngram size - 2][head] bucket primes: for each size the search restarts at
    engram_vocab_size - 1, and no prime is handed out twice across sizes, heads, layers."""
    seen, out = set(), []
    for _ in c.engram_layer_ids:
        per_layer = []
        for _ in range(c.engram_max_ngram_size - 1):
            current, sizes = c.engram_vocab_size - 1, []
            for _ in range(c.engram_n_heads):
                current += 1
                while not _is_prime(current) or current in seen:
                    current += 1
                seen.add(current)
                sizes.append(current)
            per_layer.append(sizes)
        out.append(per_layer)
    return out


def engram_multipliers(c: V41Config, compressed_vocab: int) -> np.ndarray:
    """[n_engram_layers, max_ngram] odd int64 multipliers, seeded by 10007 * layer id."""
    bound = max(1, (np.iinfo(np.int64).max // compressed_vocab) // 2)
    rows = []
    for layer in c.engram_layer_ids:
        rng = np.random.default_rng(10007 * layer)
        v = rng.integers(low=0, high=bound, size=(c.engram_max_ngram_size,), dtype=np.int64)
        rows.append(v * 2 + 1)
    return np.stack(rows)


class EngramHasher(torch.nn.Module):
    """token_map: [vocab] token id -> compressed id (None = identity, which REQUIRES
    engram_compressed_vocab_size == vocab_size)."""

    def __init__(self, c: V41Config, token_map=None):
        super().__init__()
        if token_map is None:
            assert c.engram_compressed_vocab_size == c.vocab_size, (
                "identity Engram map needs engram_compressed_vocab_size == vocab_size")
            token_map = torch.arange(c.vocab_size)
        token_map = torch.as_tensor(token_map, dtype=torch.int64)
        compressed = int(c.engram_compressed_vocab_size or token_map.max().item() + 1)
        primes = engram_primes(c)
        flat = [[p for sizes in layer for p in sizes] for layer in primes]
        offsets = [np.cumsum([0] + sizes[:-1]) for sizes in flat]
        for layer, sizes in enumerate(flat):
            assert sum(sizes) == c.engram_num_embeddings[layer], (sum(sizes), c.engram_num_embeddings)
        self.max_ngram = c.engram_max_ngram_size
        self.n_heads = c.engram_n_heads
        self.register_buffer("token_map", token_map, persistent=False)
        self.register_buffer("primes", torch.tensor(primes, dtype=torch.int64), persistent=False)
        self.register_buffer("offsets", torch.tensor(np.array(offsets), dtype=torch.int64),
                             persistent=False)
        self.register_buffer("multipliers",
                             torch.from_numpy(engram_multipliers(c, compressed)), persistent=False)
        self.pad_id = int(token_map[c.engram_pad_id])

    @torch.no_grad()
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B, S] (positions 0..S-1 of each sequence) -> [B, S, n_layers, n_cols] int64."""
        t = self.token_map[ids]
        shifted = [t]
        for k in range(1, self.max_ngram):  # t_k = id at i-k; pad once the look-back leaves the sequence
            pad = torch.full_like(t[:, :k], self.pad_id)
            shifted.append(torch.cat([pad, t[:, :-k]], dim=1)[:, : t.shape[1]])
        tokens = torch.stack(shifted, dim=-1)  # [B, S, max_ngram]
        prod = tokens.unsqueeze(2) * self.multipliers  # [B, S, n_layers, max_ngram]
        h, cols = prod[..., 0], []
        for n in range(1, self.max_ngram):
            h = torch.bitwise_xor(h, prod[..., n])
            cols.append(h.unsqueeze(-1) % self.primes[:, n - 1])  # [B, S, L, heads]
        return torch.cat(cols, dim=-1) + self.offsets
