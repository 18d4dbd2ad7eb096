"""The networks h and h* of the feature-collapse paper (eqs. 1-2, App. A.1).

    h_{W,U}(x)  = U Vec[W ζ(x)]          (no LayerNorm)
    h*_{W,U}(x) = U Vec[φ(W ζ(x))]       (parameter-free LayerNorm φ on each word vector)

Storage convention: the embedding table ``W`` is (n_w, d), so its *rows* are the paper's
columns w_(α,β); ``U`` is (K, L·d) and the concatenation puts word ℓ in entries ℓd..(ℓ+1)d, so
``U.reshape(K, L, d)[k, ℓ]`` is the paper's block u_{k,ℓ} (App. A.1, eqs. 16-17: Vec's column order).
Lemma L: h*_{W,U} = h_{φ(W),U} (φ applied row-wise to the table).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from embgeo.collapse import theory
from embgeo.core.validate import check_bool, check_float, check_positive_int, check_seed
from embgeo.errors import InputError

DTYPES = (torch.float32, torch.float64)


def layer_norm(v: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """φ(v) = (v − mean(v)) / sqrt(var(v) + eps) over the last axis (biased variance, no affine).

    ``eps = 0`` is the paper's φ (‖φ(v)‖ = √d); ``eps = 1e-5`` is PyTorch's LayerNorm default. The
    numpy version (float64, for the theory and the trained weights) is :func:`embgeo.collapse.theory.layer_norm`.
    """
    mean = v.mean(dim=-1, keepdim=True)
    c = v - mean
    var = (c * c).mean(dim=-1, keepdim=True)
    return c / torch.sqrt(var + eps)


class CollapseNet(nn.Module):
    """h (``layernorm=False``) or h* (``layernorm=True``) of the paper, eq. (1)-(2).

    Parameters
    ----------
    n_words, dim, length, n_classes : int
        n_w, d, L and K.
    layernorm : bool
        Apply the parameter-free LayerNorm φ to each word vector (network h*).
    ln_eps : float
        ε inside φ: 0 is the paper's form, 1e-5 PyTorch's default.
    init_scale : float
        Multiplies PyTorch's default init: W ~ N(0, 1) (``nn.Embedding``), U ~ U(−1/√(Ld), 1/√(Ld))
        (``nn.Linear``'s Kaiming-uniform). The paper's notebooks use 1e-3.
    seed : int
        Seed of the ``torch.Generator`` drawing W then U.
    dtype : torch.float32 (default) or torch.float64

    Attributes
    ----------
    W : nn.Parameter (n_w, d)
        The embedding table; row j is the paper's w_j for the word with id j = α·s_c + β.
    U : nn.Parameter (K, L·d)
        The bias-free linear layer.

    ``forward(x)`` maps word ids (B, L) to logits (B, K).
    """

    def __init__(self, n_words: int, dim: int, length: int, n_classes: int, layernorm: bool = False,
                 ln_eps: float = 0.0, init_scale: float = 1e-3, seed: int = 0, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.n_words = check_positive_int("n_words", n_words)
        self.dim = check_positive_int("dim", dim)
        self.length = check_positive_int("length", length)
        self.n_classes = check_positive_int("n_classes", n_classes)
        self.layernorm = check_bool("layernorm", layernorm)
        self.ln_eps = check_float("ln_eps", ln_eps, positive=False)
        init_scale = check_float("init_scale", init_scale, positive=False)
        seed = check_seed(seed)
        if dtype not in DTYPES:
            raise InputError(f"dtype: expected torch.float32 or torch.float64, got {dtype!r}")
        gen = torch.Generator().manual_seed(int(seed))
        fan_in = self.length * self.dim
        bound = 1.0 / math.sqrt(fan_in)
        W = torch.randn(self.n_words, self.dim, generator=gen, dtype=torch.float64)
        U = (torch.rand(self.n_classes, fan_in, generator=gen, dtype=torch.float64) * 2 - 1) * bound
        self.W = nn.Parameter((W * init_scale).to(dtype))
        self.U = nn.Parameter((U * init_scale).to(dtype))
        self.init_scale = init_scale
        self.seed = int(seed)

    # -- forward ----------------------------------------------------------------------------------

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Vec[W ζ(x)] or Vec[φ(W ζ(x))]: (B, L·d) for word ids x (B, L)."""
        if x.ndim != 2 or x.shape[1] != self.length:
            raise InputError(f"x: expected word ids of shape (B, length) = (B, {self.length}), got {tuple(x.shape)}")
        v = self.W[x]  # (B, L, d)
        if self.layernorm:
            v = layer_norm(v, self.ln_eps)
        return v.reshape(x.shape[0], self.length * self.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits h(x) or h*(x): (B, K)."""
        return self.features(x) @ self.U.T

    # -- numpy accessors --------------------------------------------------------------------------

    def word_embeddings(self) -> np.ndarray:
        """(n_w, d) float64: w_j, one word per row."""
        return self.W.detach().to(torch.float64).cpu().numpy().copy()

    def word_representations(self) -> np.ndarray:
        """(n_w, d) float64: φ(w_j) for h* (the collapsed objects of Fig. 4c), else w_j."""
        W = self.word_embeddings()
        return theory.layer_norm(W, self.ln_eps) if self.layernorm else W

    def u_matrix(self) -> np.ndarray:
        """(K, L·d) float64: U."""
        return self.U.detach().to(torch.float64).cpu().numpy().copy()

    def u_blocks(self) -> np.ndarray:
        """(K, L, d) float64: u_{k,ℓ} at [k, ℓ] (row-major reshape of U, matching the concat order)."""
        return self.u_matrix().reshape(self.n_classes, self.length, self.dim)

    def extra_repr(self) -> str:
        return (f"n_words={self.n_words}, dim={self.dim}, length={self.length}, n_classes={self.n_classes}, "
                f"layernorm={self.layernorm}, ln_eps={self.ln_eps:g}, dtype={self.W.dtype}")
