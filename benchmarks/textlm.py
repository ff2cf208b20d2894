"""``gpt-tiny``: a small decoder-only transformer language model, byte-level, on a corpus
every machine has: the Python standard library's own source files.

The corpus is the ``.py`` files directly in the running interpreter's standard
library folder (``sysconfig.get_paths()["stdlib"]``; no subfolders, no tests), in
sorted order, concatenated as bytes, capped at ``CORPUS_BYTES``; the last tenth is
the validation text. Nothing is downloaded. Two machines with different Python
patch releases read slightly different text; the run records which folder it read.

Sequences are windows of ``CONTEXT`` + 1 bytes taken every ``CONTEXT`` bytes: the
input is the first ``CONTEXT``, the target the same shifted by one. The model is
GPT-2-shaped (token + position embeddings, pre-norm blocks of causal self-attention
and a GELU MLP, a final LayerNorm, a linear head), built from torch's own
``nn.TransformerEncoderLayer`` with a causal mask; no dropout, so a run with
``--steps`` is bitwise reproducible. It trains with AdamW (the LM default) and
is scored by validation perplexity (lower is better).
"""
from __future__ import annotations

import functools
import sysconfig
from pathlib import Path

import numpy as np

CONTEXT, VOCAB = 64, 256
WIDTH, LAYERS, HEADS = 160, 4, 4
CORPUS_BYTES = 4 << 20    # 4 MiB: ~58k training windows, more than a benchmark run reads
VALID_SHARE = 0.1
VALID_WINDOWS = 512       # the evaluator's text: 32k bytes of it


def corpus_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


@functools.cache
def corpus() -> np.ndarray:
    """The corpus as uint8 bytes (see the module docstring)."""
    out, size = [], 0
    for path in sorted(corpus_dir().glob("*.py")):
        data = path.read_bytes()
        out.append(data)
        size += len(data)
        if size >= CORPUS_BYTES:
            break
    text = np.frombuffer(b"".join(out)[:CORPUS_BYTES], dtype=np.uint8)
    if len(text) < 100 * CONTEXT:
        raise ValueError(f"the corpus in {corpus_dir()} has only {len(text)} bytes of Python source")
    return text


def windows(text: np.ndarray, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, targets): int64 [N, CONTEXT] each, the targets shifted one byte on."""
    n = (len(text) - 1) // CONTEXT
    n = min(n, limit) if limit else n
    starts = np.arange(n) * CONTEXT
    idx = starts[:, None] + np.arange(CONTEXT + 1)[None, :]
    seq = text[idx].astype(np.int64)
    return seq[:, :-1], seq[:, 1:]


def split(part: str) -> tuple[np.ndarray, np.ndarray]:
    text = corpus()
    cut = int(len(text) * (1 - VALID_SHARE))
    return windows(text[:cut]) if part == "train" else windows(text[cut:], VALID_WINDOWS)


def build_model(cfg=None):
    import torch
    from torch import nn

    class TinyGPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(VOCAB, WIDTH)
            self.pos = nn.Embedding(CONTEXT, WIDTH)
            block = nn.TransformerEncoderLayer(WIDTH, HEADS, 4 * WIDTH, dropout=0.0, activation="gelu",
                                               batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(block, LAYERS, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(WIDTH)
            self.head = nn.Linear(WIDTH, VOCAB, bias=False)
            # a plain attribute, not a buffer: buffers travel with the weights (psmodes/flatparams.py)
            self.causal = nn.Transformer.generate_square_subsequent_mask(CONTEXT)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            t = x.shape[1]
            h = self.tok(x) + self.pos(torch.arange(t, device=x.device))
            mask = self.causal[:t, :t].to(x.device)
            return self.head(self.norm(self.blocks(h, mask=mask, is_causal=True)))  # [B, T, VOCAB]

    return TinyGPT()


def to_inputs(batch: np.ndarray):
    import torch

    return torch.from_numpy(np.ascontiguousarray(batch))


def workloads():
    from .metrics import PERPLEXITY
    from .workload import Workload

    return {
        "gpt-tiny": Workload(
            "gpt-tiny", "a GPT-shaped byte-level LM (4 layers, width 160, context 64: 1.3M parameters) on the "
            "Python standard library's source; AdamW 1e-3, batch 16 sequences; scored by validation perplexity",
            lr=1e-3, batch_size=16, needs_data=False, optimizer="adamw", metric=PERPLEXITY,
            build_model=build_model, load_train=lambda cfg: split("train"),
            load_test=lambda cfg: split("valid"), to_inputs=to_inputs),
    }
