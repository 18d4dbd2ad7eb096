"""Attention models of *Attention with Trained Embeddings Provably Selects Important Tokens*.

Paper file ``attention-trained-embeddings.txt``; readings where it is silent: ``docs/papers/attention/readings.rst``.

* :class:`OneLayerAttention`: model (1), ``f(X) = Σ_i softmax_i(pᵀE_{x_i}) · E_{x_i}ᵀv``, with
  the ⟨cls⟩ embedding p as the only query (the softmax runs over the T context tokens; cls is not a
  key), token embeddings E (|S|, d) and the head v. Computed through the per-vocabulary scalars
  ``a = E p`` and ``b = E v`` (Lemma A.1 rewritten, derived here): no (B, T, d) tensor is built.
* :func:`one_layer_forward_naive`: the same model through the (B, T, d) gather ``E[X]``; a
  reference for tests only.
* :func:`one_layer_gradients`: the exact gradients of the loss (2) (Lemma A.1) in the efficient
  scalar form ``∇_{E_s}L = (∂L/∂a_s) p + (∂L/∂b_s) v``, ``∇_p L = Eᵀ ∂L/∂a``.
* :class:`TwoLayerAttention`: model (17), ``E′_X = LayerNorm(Softmax(E_X E_Xᵀ) E_X + E_X)``
  followed by model (1) on E′_X.
* :func:`logistic_loss`: the loss (2), ``mean log(1 + exp(−y f))`` via softplus.

Conventions: a batch is ``X`` (B, T) integer token ids, padded with ``pad_id`` (the package
convention, :mod:`embgeo.attention`; None: no padding). Positions equal to ``pad_id`` get
attention weight exactly 0 (they are replaced by id 0 before the gather, so ``pad_id`` may lie
outside ``[0, |S|)``). Every sequence needs at least one real token. Labels ``y`` are ±1. Models
default to float64 (our choice for implicit-bias runs: as ‖p_t‖ → ∞, float32 attention weights underflow to 0).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from numpy.typing import ArrayLike
from torch import nn

from embgeo.attention.data import check_pad_id
from embgeo.core.validate import check_bool, check_dense_size, check_float, check_positive_int, check_seed
from embgeo.errors import InputError, ShapeError

__all__ = ["OneLayerAttention", "Tokens", "TwoLayerAttention", "batch_gradients", "check_labels", "logistic_loss",
           "masked_softmax", "one_layer_forward_naive", "one_layer_gradients", "prepare_batch"]

#: Token ids: a numpy array, a nested list or a torch tensor of integers.
Tokens = ArrayLike | torch.Tensor


# -- inputs ----------------------------------------------------------------------------------------

def prepare_batch(X: Tokens, pad_id: int | None = None,
                  n_tokens: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate a batch padded with ``pad_id``; return ``(X, real)``: a long (B, T) tensor with the pads set
    to id 0 and the bool (B, T) tensor that is True at the real tokens (``X != pad_id``).

    Raises :class:`ShapeError` on wrong shapes and :class:`InputError` on ids outside
    ``[0, n_tokens)`` at real positions, on a sequence that is only padding, or on a ``pad_id``
    that is not an integer.
    """
    pad_id = check_pad_id(pad_id)
    X = torch.as_tensor(np.asarray(X) if not isinstance(X, torch.Tensor) else X)
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
        raise ShapeError(f"X: expected a non-empty 2-D (B, T) array of token ids, got shape {tuple(X.shape)}")
    if X.dtype.is_floating_point or X.dtype == torch.bool or X.dtype.is_complex:
        raise InputError(f"X: expected integer token ids, got dtype {X.dtype}")
    X = X.long()
    real = torch.ones(X.shape, dtype=torch.bool, device=X.device) if pad_id is None else X != pad_id
    if not bool(real.any(dim=1).all()):
        bad = int((~real.any(dim=1)).nonzero()[0])
        raise InputError(f"X: sequence {bad} contains only padding (pad_id={pad_id}); every sequence needs a token")
    ids = X[real]
    if n_tokens is not None and (int(ids.min()) < 0 or int(ids.max()) >= n_tokens):
        where = "" if pad_id is None else f" (entries != pad_id={pad_id})"
        raise InputError(f"X: token ids must lie in [0, {n_tokens}) at real positions{where}; "
                         f"found range [{int(ids.min())}, {int(ids.max())}]")
    return X.masked_fill(~real, 0), real


def check_labels(y: ArrayLike | torch.Tensor, B: int, dtype: torch.dtype) -> torch.Tensor:
    """Labels ``y`` as a (B,) tensor of ``dtype``; every entry must be +1 or −1."""
    y = torch.as_tensor(np.asarray(y) if not isinstance(y, torch.Tensor) else y).to(dtype)
    if y.shape != (B,):
        raise ShapeError(f"y: expected shape ({B},), got {tuple(y.shape)}")
    if not bool(torch.all((y == 1) | (y == -1))):
        raise InputError("y: labels must be +1 or -1")
    return y


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax of ``scores`` along ``dim`` with masked-out entries set to −inf (weight exactly 0)."""
    return torch.softmax(scores.masked_fill(~mask, -math.inf), dim=dim)


def logistic_loss(f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Loss (2): ``mean_k log(1 + exp(−y_k f_k))``, computed stably as ``softplus(−y f)``; f, y shape (B,)."""
    return F.softplus(-y * f).mean()


def _init(n_tokens: int, dim: int, seed: int, dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """E⁰ (|S|, d) and p⁰ (d,) i.i.d. 𝒩(0, I/d); v (d,) a uniformly random unit vector (Sec. 4.1)."""
    gen = torch.Generator().manual_seed(check_seed(seed))
    E = torch.randn(n_tokens, dim, generator=gen, dtype=dtype) / math.sqrt(dim)
    p = torch.randn(dim, generator=gen, dtype=dtype) / math.sqrt(dim)
    v = torch.randn(dim, generator=gen, dtype=dtype)
    return E, p, v / v.norm()


# -- model (1) -------------------------------------------------------------------------------------

def _set_parameters(module: nn.Module, n_tokens: int, dim: int, train_v: bool, seed: int, dtype) -> None:
    """E (|S|, d), p (d,) and v (d,) of both models: parameters, v a buffer unless ``train_v``."""
    module.n_tokens = check_positive_int("n_tokens", n_tokens)
    module.dim = check_positive_int("dim", dim)
    module.train_v = check_bool("train_v", train_v)
    E, p, v = _init(module.n_tokens, module.dim, seed, dtype)
    module.E = nn.Parameter(E)
    module.p = nn.Parameter(p)
    if train_v:
        module.v = nn.Parameter(v)
    else:
        module.register_buffer("v", v)


class OneLayerAttention(nn.Module):
    """Model (1): ``f(X; p, E) = Softmax(pᵀ𝐄_Xᵀ) 𝐄_X v = Σ_i q_i(X) E_{x_i}ᵀv``, ``q = softmax_i(pᵀE_{x_i})``.

    Parameters
    ----------
    n_tokens, dim : int
        Vocabulary size |S| and embedding dimension d.
    train_v : bool
        If False (the theory, eq. 2), v is a fixed buffer; if True it is a parameter (the
        experiments train "all the parameters", Sec. 5).
    seed : int
        Init seed: E⁰, p⁰ ~ 𝒩(0, I/d) i.i.d., v uniform on the unit sphere.
    dtype : torch dtype
        float64 by default.

    Attributes
    ----------
    E : Parameter (|S|, d);  p : Parameter (d,);  v : Parameter or buffer (d,).
    """

    def __init__(self, n_tokens: int, dim: int, *, train_v: bool = False, seed: int = 0,
                 dtype: torch.dtype = torch.float64):
        super().__init__()
        _set_parameters(self, n_tokens, dim, train_v, seed, dtype)

    def scores(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The per-vocabulary scalars ``a = E p`` (attention scores) and ``b = E v`` (token values), both (|S|,)."""
        return self.E @ self.p, self.E @ self.v

    def attention(self, X: Tokens, *, pad_id: int | None = None) -> torch.Tensor:
        """Attention weights q (B, T) of the cls query over the tokens (0 at padding)."""
        X, real = prepare_batch(X, pad_id, self.n_tokens)
        return masked_softmax((self.E @ self.p)[X], real)

    def forward(self, X: Tokens, *, pad_id: int | None = None) -> torch.Tensor:
        """Model output f (B,) for token ids X (B, T) padded with ``pad_id``; cost O(|S| d + B T)."""
        X, real = prepare_batch(X, pad_id, self.n_tokens)
        a, b = self.scores()
        q = masked_softmax(a[X], real)
        return (q * b[X]).sum(dim=1)

    def loss(self, X: Tokens, y: ArrayLike | torch.Tensor, *, pad_id: int | None = None) -> torch.Tensor:
        """Loss (2) on the batch; y (B,) in {±1}."""
        f = self(X, pad_id=pad_id)
        return logistic_loss(f, check_labels(y, f.shape[0], f.dtype))


def one_layer_forward_naive(E: torch.Tensor, p: torch.Tensor, v: torch.Tensor, X: Tokens, *,
                            pad_id: int | None = None) -> torch.Tensor:
    """Model (1) computed literally as ``Softmax(pᵀ𝐄_Xᵀ) 𝐄_X v`` with the (B, T, d) gather 𝐄_X = E[X].

    A reference for tests (memory B·T·d); use :class:`OneLayerAttention` otherwise. Returns f (B,).
    """
    X, real = prepare_batch(X, pad_id, E.shape[0])
    check_dense_size("one_layer_forward_naive", (*X.shape, E.shape[1]), "use OneLayerAttention (scalar path)")
    EX = E[X]                                   # (B, T, d)
    q = masked_softmax(EX @ p, real)            # (B, T)
    return torch.einsum("bt,btd,d->b", q, EX, v)


@torch.no_grad()
def one_layer_gradients(E: torch.Tensor, p: torch.Tensor, v: torch.Tensor, X: Tokens, y: ArrayLike | torch.Tensor, *,
                        pad_id: int | None = None, with_v: bool = False) -> dict[str, torch.Tensor]:
    """Exact gradients of the loss (2) of model (1) (Lemma A.1), without autograd and without 𝐄_X.

    With a_s = pᵀE_s, b_s = vᵀE_s, q the attention (B, T), f the output (B,), g = 1/(1+exp(y f))
    and Ê the mean over the n = B sequences (Lemma A.1 in a_s, b_s; the rewriting is derived here)::

        ∂L/∂b_s = −Ê[y g Σ_i 1{x_i=s} q_i]
        ∂L/∂a_s = −Ê[y g Σ_i 1{x_i=s} q_i (b_{x_i} − f)]
        ∇_{E_s}L = (∂L/∂a_s) p + (∂L/∂b_s) v,   ∇_p L = Eᵀ ∂L/∂a,   ∇_v L = Eᵀ ∂L/∂b

    Parameters
    ----------
    E (|S|, d), p (d,), v (d,) : tensors;  X (B, T) padded with ``pad_id``, y (B,) : the batch.
    with_v : bool
        Also return ``"v"`` (for the experiments, where v is trained).

    Returns
    -------
    dict with ``"E"`` (|S|, d), ``"p"`` (d,), optionally ``"v"`` (d,), and ``"loss"`` (scalar),
    ``"f"`` (B,), ``"q"`` (B, T), ``"dL_da"`` and ``"dL_db"`` (|S|,).
    """
    X, real = prepare_batch(X, pad_id, E.shape[0])
    y = check_labels(y, X.shape[0], E.dtype)
    return batch_gradients(E, p, v, X, y, real, with_v=check_bool("with_v", with_v))


@torch.no_grad()
def batch_gradients(E: torch.Tensor, p: torch.Tensor, v: torch.Tensor, X: torch.Tensor, y: torch.Tensor,
                    real: torch.Tensor, *, with_v: bool = False) -> dict[str, torch.Tensor]:
    """:func:`one_layer_gradients` on a batch already through :func:`prepare_batch` and :func:`check_labels`.

    ``X`` (B, T) long with valid ids everywhere, ``y`` (B,) of E's dtype, ``real`` (B, T) bool; for
    loops that take many gradients of one batch (no validation here).
    """
    a, b = E @ p, E @ v
    bX = b[X]
    q = masked_softmax(a[X], real)
    f = (q * bX).sum(dim=1)
    g = torch.sigmoid(-y * f)                            # 1 / (1 + exp(y f))
    dL_df = -(y * g) / X.shape[0]                        # (B,)
    cb = dL_df[:, None] * q                              # (B, T); 0 at pads since q = 0 there
    ca = cb * (bX - f[:, None])
    ids = X.reshape(-1)
    dL_db = torch.zeros_like(b).index_add_(0, ids, cb.reshape(-1))
    dL_da = torch.zeros_like(a).index_add_(0, ids, ca.reshape(-1))
    out = {"E": dL_da[:, None] * p[None, :] + dL_db[:, None] * v[None, :], "p": E.T @ dL_da,
           "loss": logistic_loss(f, y), "f": f, "q": q, "dL_da": dL_da, "dL_db": dL_db}
    if with_v:
        out["v"] = E.T @ dL_db
    return out


# -- model (17) ------------------------------------------------------------------------------------

class TwoLayerAttention(nn.Module):
    """Model (17): ``E′_X = LayerNorm(Softmax(𝐄_X 𝐄_Xᵀ) 𝐄_X + 𝐄_X)``, ``f = Softmax(pᵀE′_Xᵀ) E′_X v``.

    Layer 1 is self-attention of the tokens with queries = keys = values = 𝐄_X (no W's, no 1/√d,
    row-wise softmax over the real keys only), plus a skip connection and a LayerNorm over d
    (PyTorch default: learnable affine, eps 1e-5; the paper does not say, our choice). Layer 2
    is model (1) on the contextual embeddings E′_X with the cls query p. The cls token is not part
    of layer 1. Memory: (B, T, d) and (B, T, T) tensors.

    Parameters
    ----------
    n_tokens, dim : int
    train_v : bool
        v trained (True) or fixed buffer (False).
    seed : int
        Init seed (E, p ~ 𝒩(0, I/d), v unit; LayerNorm weight 1, bias 0).
    ln_eps : float
        LayerNorm epsilon.
    dtype : torch dtype
    """

    def __init__(self, n_tokens: int, dim: int, *, train_v: bool = False, seed: int = 0, ln_eps: float = 1e-5,
                 dtype: torch.dtype = torch.float64):
        super().__init__()
        _set_parameters(self, n_tokens, dim, train_v, seed, dtype)
        self.norm = nn.LayerNorm(self.dim, eps=check_float("ln_eps", ln_eps), dtype=dtype)

    def scores(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``E p`` and ``E v`` (|S|,) of the raw input embeddings, the quantities plotted in Fig. 1.

        The contextual E′_X depends on the sequence, so a per-token scalar can only come from the
        rows of E; the paper's Fig. 1 axes name E_s [our inference, not stated in the paper].
        """
        return self.E @ self.p, self.E @ self.v

    def contextual(self, X: Tokens, *, pad_id: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer 1: ``(E′_X, real)`` with E′_X (B, T, d) and ``real`` (B, T) True at the tokens; rows at
        padding are finite but meaningless."""
        X, real = prepare_batch(X, pad_id, self.n_tokens)
        B, T = X.shape
        check_dense_size("TwoLayerAttention", (B, T, max(T, self.dim)), "use a smaller batch")
        EX = self.E[X]                                           # (B, T, d)
        A = masked_softmax(EX @ EX.transpose(1, 2), real[:, None, :])   # (B, T, T), padded keys get 0
        return self.norm(A @ EX + EX), real

    def attention(self, X: Tokens, *, pad_id: int | None = None) -> torch.Tensor:
        """Layer-2 attention weights q (B, T) of the cls query over E′_X (0 at padding)."""
        H, real = self.contextual(X, pad_id=pad_id)
        return masked_softmax(H @ self.p, real)

    def forward(self, X: Tokens, *, pad_id: int | None = None) -> torch.Tensor:
        """Model output f (B,) for token ids X (B, T) padded with ``pad_id``."""
        H, real = self.contextual(X, pad_id=pad_id)
        q = masked_softmax(H @ self.p, real)
        return (q * (H @ self.v)).sum(dim=1)

    def loss(self, X: Tokens, y: ArrayLike | torch.Tensor, *, pad_id: int | None = None) -> torch.Tensor:
        """Loss (2) on the batch; y (B,) in {±1}."""
        f = self(X, pad_id=pad_id)
        return logistic_loss(f, check_labels(y, f.shape[0], f.dtype))
