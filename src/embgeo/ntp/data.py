"""The NTP training set in the paper's eq. (2) view, and its generators.

Paper: ``ntp-implicit-bias-neurips.txt`` Sec. 2 (notation of the long version). The n training
pairs (context, next token) are summarised by the m *distinct* contexts: their embeddings
h̄_j ∈ R^d, their empirical weights π̂_j and their sparse next-token distributions p̂_j ∈ Δ^{V-1}.
The loss (2) depends on the data only through these, so that is what :class:`NTPData` holds.

Conventions: ``embeddings`` is (m, d) with one context per *row* (the paper's H̄ is its
transpose); token ids are 0-based (the paper's word 1 is token 0).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
import scipy.sparse as sp

from embgeo.core.validate import as_float_array, check_dense_size, check_positive_int, make_rng
from embgeo.errors import DistributionError, InputError, ShapeError

#: Tolerance on row sums of ``probs`` and on the sum of ``weights``.
SIMPLEX_ATOL = 1e-8


class NTPData:
    """A next-token-prediction training set over m distinct contexts (paper eq. 2).

    Parameters
    ----------
    embeddings : array (m, d)
        Context embeddings h̄_j, one per row.
    probs : array or scipy.sparse matrix (m, V)
        Next-token distributions p̂_j; each row non-negative, finite, summing to 1 (within
        1e-8; rows are then renormalised exactly). The support S_j is the set of positive
        entries.
    weights : array (m,), optional
        Empirical context probabilities π̂_j, strictly positive, summing to 1. Uniform if omitted.
    token_labels, context_labels : sequences of str, optional
        Names used in plots and summaries.

    Attributes
    ----------
    embeddings : (m, d) float64, read-only
    probs : scipy.sparse.csr_matrix (m, V) float64 with sorted indices and no explicit zeros
    weights : (m,) float64, read-only
    supports : list of m int arrays, the sorted support S_j of each context
    support_sizes : (m,) int, S_j
    anchors : (m,) int, an anchor token z_j ∈ S_j per context (the most probable one); the
        paper's anchor form of the constraints (Sec. 3) is built around it.

    Examples
    --------
    >>> import numpy as np
    >>> from embgeo.ntp import NTPData
    >>> data = NTPData(np.eye(2), [[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])
    >>> data.m, data.V, data.d, data.support_sizes.tolist()
    (2, 3, 2, [2, 1])
    """

    def __init__(self, embeddings, probs, weights=None, *, token_labels=None, context_labels=None):
        H = as_float_array("embeddings", embeddings, ndim=2)
        m, d = H.shape
        if m == 0 or d == 0:
            raise ShapeError(f"embeddings: expected shape (m, d) with m, d >= 1, got {H.shape}")
        P = _as_probability_matrix(probs, m)
        V = P.shape[1]
        if V < 2:
            raise ShapeError(f"probs: the vocabulary needs at least 2 tokens, got V={V}")
        pi = _as_weights(weights, m)

        H.setflags(write=False)
        pi.setflags(write=False)
        self.embeddings = H
        self.probs = P
        self.weights = pi
        self.supports = [P.indices[P.indptr[j]:P.indptr[j + 1]].copy() for j in range(m)]
        self.support_sizes = np.diff(P.indptr).astype(np.int64)
        # The most probable in-support token as anchor: log-odds against it are >= 0.
        self.anchors = np.array([P.indices[P.indptr[j] + np.argmax(P.data[P.indptr[j]:P.indptr[j + 1]])]
                                 for j in range(m)], dtype=np.int64)
        self.token_labels = _as_labels("token_labels", token_labels, V)
        self.context_labels = _as_labels("context_labels", context_labels, m)
        #: The distinct contexts as token tuples, when built by :meth:`from_sequences`.
        self.contexts: list[tuple[int, ...]] | None = None
        #: Number of training pairs n behind π̂ and p̂, when known.
        self.n_samples: int | None = None

    # -- sizes ---------------------------------------------------------------------------
    @property
    def m(self) -> int:
        """Number of distinct contexts."""
        return self.embeddings.shape[0]

    @property
    def d(self) -> int:
        """Embedding dimension."""
        return self.embeddings.shape[1]

    @property
    def V(self) -> int:
        """Vocabulary size."""
        return self.probs.shape[1]

    def support_mask(self) -> np.ndarray:
        """Dense boolean (m, V) array: ``mask[j, z]`` is True iff z ∈ S_j."""
        check_dense_size("support_mask", (self.m, self.V))
        mask = np.zeros((self.m, self.V), dtype=bool)
        rows = np.repeat(np.arange(self.m), self.support_sizes)
        mask[rows, self.probs.indices] = True
        return mask

    def __repr__(self) -> str:
        S = self.support_sizes
        return (f"NTPData(m={self.m}, V={self.V}, d={self.d}, "
                f"S_j in [{S.min()}, {S.max()}], n_samples={self.n_samples})")

    # -- constructors --------------------------------------------------------------------
    @classmethod
    def from_sequences(cls, tokens: Iterable[Sequence[int]], context_length: int, embed="onehot", *,
                       autoregressive: bool = False, vocab_size: int | None = None, seed: int = 0) -> NTPData:
        """Build the training set from integer token sequences (paper Sec. 2 and App. C).

        Counting: every training pair (context x_i, next token z_i) adds one count; distinct
        contexts are deduplicated in order of first appearance; π̂_j = n_j / n and
        p̂_{j,z} = n_{j,z} / n_j (so supports are the tokens actually observed).

        Parameters
        ----------
        tokens : iterable of integer sequences
            Token ids in [0, V).
        context_length : int
            k. Default (fixed-length, last-token) setting: each sequence gives one pair, its
            last token predicted from the k tokens before it; every sequence needs >= k+1 tokens.
        embed : "onehot" | "random:D" | callable
            Context embeddings: one-hot per distinct context (d = m); seeded i.i.d. N(0, 1)
            vectors of dimension D; or a callable mapping the list of distinct context tuples
            to an (m, d) array.
        autoregressive : bool
            All-prefix setting (paper App. C): each sequence gives the pairs
            (z_{<t}, z_t) for t = 1..min(k, len-1), so contexts have lengths 1..k.
        vocab_size : int, optional
            V; defaults to max token id + 1.
        seed : int
            Seed of the "random:D" embeddings.
        """
        k = check_positive_int("context_length", context_length)
        seqs = _as_sequences(tokens)
        pairs: list[tuple[tuple[int, ...], int]] = []
        for i, seq in enumerate(seqs):
            if autoregressive:
                if len(seq) < 2:
                    raise InputError(f"tokens: sequence {i} has {len(seq)} token(s); the autoregressive "
                                     "setting needs at least 2")
                pairs.extend((tuple(seq[:t]), seq[t]) for t in range(1, min(k, len(seq) - 1) + 1))
            else:
                if len(seq) < k + 1:
                    raise InputError(f"tokens: sequence {i} has {len(seq)} token(s); context_length={k} "
                                     f"needs at least {k + 1} (use autoregressive=True for shorter ones)")
                pairs.append((tuple(seq[-k - 1:-1]), seq[-1]))
        max_token = max(max(seq) for seq in seqs)
        V = max_token + 1 if vocab_size is None else check_positive_int("vocab_size", vocab_size, 2)
        if max_token >= V:
            raise InputError(f"tokens: token id {max_token} is out of range for vocab_size={V}")

        index: dict[tuple[int, ...], int] = {}
        for ctx, _ in pairs:
            index.setdefault(ctx, len(index))
        counts = Counter((index[ctx], z) for ctx, z in pairs)
        m = len(index)
        rows, cols = zip(*counts.keys(), strict=True)
        C = sp.csr_matrix((np.fromiter(counts.values(), float), (rows, cols)), shape=(m, V))
        n_j = np.asarray(C.sum(axis=1)).ravel()
        P = sp.diags(1.0 / n_j) @ C
        contexts = list(index.keys())
        H = _embed_contexts(embed, contexts, seed)
        data = cls(H, P, n_j / n_j.sum(), context_labels=[" ".join(map(str, c)) for c in contexts])
        data.contexts = contexts
        data.n_samples = len(pairs)
        return data


def read_token_file(path) -> list[list[int]]:
    """Read integer token sequences from a text file: one sequence per line, ids separated by
    whitespace; blank lines are skipped. Errors name the file, line and offending text."""
    seqs = []
    try:
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, start=1):
                fields = line.split()
                if not fields:
                    continue
                try:
                    seq = [int(f) for f in fields]
                except ValueError:
                    bad = next(f for f in fields if not f.lstrip("-").isdigit())
                    raise InputError(f"{path}:{lineno}: expected integer token ids, found {bad!r}") from None
                if min(seq) < 0:
                    raise InputError(f"{path}:{lineno}: negative token id {min(seq)}")
                seqs.append(seq)
    except OSError as exc:
        raise InputError(f"tokens file: cannot read {path} ({exc.strerror})") from None
    if not seqs:
        raise InputError(f"{path}: no token sequences (the file is empty)")
    return seqs


# -- generators -------------------------------------------------------------------------------

def synthetic(m: int = 50, V: int = 10, d: int = 60, support_size: int = 6, *, alpha: float = 1.0,
              n_samples: int | None = None, embedding_scale: float = 1.0, seed: int = 0) -> NTPData:
    """The random data model of the paper's Figs. 3-4 (App. A.2): defaults are its sizes.

    Each context gets a support of ``support_size`` tokens drawn uniformly without
    replacement, probabilities on it from Dirichlet(alpha) (alpha=1: uniform on the simplex;
    the digest shows this matches the printed 𝓗 ≈ 1.445 nats while e.g. normalised uniforms do
    not), and an embedding with i.i.d. N(0, embedding_scale²) entries (the paper does not state
    the distribution or scale; N(0, 1) is our reading).

    With ``n_samples=None`` (default) π̂ is uniform and p̂ the drawn distributions, so every
    S_j equals ``support_size`` as the paper states. With ``n_samples=n`` the n training
    pairs are sampled (contexts uniformly, next tokens from p_j) and π̂, p̂ re-estimated from
    the counts: supports may then shrink and unseen contexts are dropped.
    """
    m = check_positive_int("m", m)
    V = check_positive_int("V", V, 2)
    d = check_positive_int("d", d)
    S = check_positive_int("support_size", support_size)
    if S > V:
        raise InputError(f"support_size: must be <= V={V}, got {S}")
    if not (np.isfinite(alpha) and alpha > 0):
        raise InputError(f"alpha: the Dirichlet concentration must be > 0, got {alpha}")
    if not (np.isfinite(embedding_scale) and embedding_scale > 0):
        raise InputError(f"embedding_scale: must be > 0, got {embedding_scale}")
    rng = make_rng(seed)
    P = np.zeros((m, V))
    for j in range(m):
        P[j, rng.choice(V, size=S, replace=False)] = rng.dirichlet(np.full(S, float(alpha)))
    H = embedding_scale * rng.standard_normal((m, d))
    if n_samples is None:
        return NTPData(H, P)
    n = check_positive_int("n_samples", n_samples)
    ctx_counts = rng.multinomial(n, np.full(m, 1.0 / m))
    counts = np.array([rng.multinomial(c, P[j]) for j, c in enumerate(ctx_counts)], dtype=float)
    seen = ctx_counts > 0
    counts, ctx_counts = counts[seen], ctx_counts[seen]
    data = NTPData(H[seen], counts / ctx_counts[:, None], ctx_counts / n)
    data.n_samples = n
    return data


#: Support pattern of the Fig. 1-2 toy, 0-based (the paper's words 1..5 are tokens 0..4).
#: The captions cannot all hold (digest, Fig. 1 "Inconsistency"); this pattern keeps "word 3
#: only follows A" and "words 1 and 5 share a support pattern" (they follow B and C).
TOY2D_SUPPORTS = ((1, 2, 3), (0, 1, 4), (0, 3, 4))


def toy2d(seed: int = 0) -> NTPData:
    """The 2-D toy of the paper's Figs. 1-2: d=2, m=3 contexts A, B, C, V=5, S_j=3.

    Embeddings are unit vectors at 90°, 210° and 330° (equiangular, which makes the data
    NTP-separable; the paper does not print its coordinates). Probabilities on the supports
    :data:`TOY2D_SUPPORTS` are Dirichlet(1) draws ("assigned randomly"); the paper's realization
    had 𝓗 = 0.8811 nats, a seed gives another realization.
    """
    rng = make_rng(seed)
    angles = np.deg2rad([90.0, 210.0, 330.0])
    H = np.column_stack([np.cos(angles), np.sin(angles)])
    P = np.zeros((3, 5))
    for j, supp in enumerate(TOY2D_SUPPORTS):
        P[j, list(supp)] = rng.dirichlet(np.ones(len(supp)))
    return NTPData(H, P, context_labels=["A", "B", "C"], token_labels=[str(z + 1) for z in range(5)])


# -- validation helpers -------------------------------------------------------------------------

def _as_probability_matrix(probs, m: int) -> sp.csr_matrix:
    if sp.issparse(probs):
        P = sp.csr_matrix(probs, dtype=np.float64, copy=True)
    else:
        try:
            dense = np.asarray(probs, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise DistributionError(f"probs: expected a numeric array of shape (m, V), got {type(probs).__name__} "
                                    f"({exc})") from None
        if dense.ndim != 2:
            raise ShapeError(f"probs: expected a 2-D array of shape (m, V), got shape {dense.shape}")
        P = sp.csr_matrix(np.where(np.isfinite(dense), dense, np.nan))  # keep NaN/inf as explicit entries
    if P.shape[0] != m:
        raise ShapeError(f"probs: expected {m} rows (one per context, as embeddings), got shape {P.shape}")
    P.sum_duplicates()
    if not np.all(np.isfinite(P.data)):
        j = int(np.searchsorted(P.indptr, np.flatnonzero(~np.isfinite(P.data))[0], side="right") - 1)
        raise DistributionError(f"probs: entries must be finite; row {j} has a NaN or infinite entry")
    if np.any(P.data < 0):
        j = int(np.searchsorted(P.indptr, np.flatnonzero(P.data < 0)[0], side="right") - 1)
        raise DistributionError(f"probs: row {j} has a negative entry; rows must be probability vectors")
    P.eliminate_zeros()
    P.sort_indices()
    sizes = np.diff(P.indptr)
    if np.any(sizes == 0):
        j = int(np.flatnonzero(sizes == 0)[0])
        raise DistributionError(f"probs: row {j} has an empty support (all zeros); every context needs "
                                "at least one next token")
    sums = np.asarray(P.sum(axis=1)).ravel()
    bad = np.flatnonzero(np.abs(sums - 1.0) > SIMPLEX_ATOL)
    if bad.size:
        j = int(bad[0])
        raise DistributionError(f"probs: row {j} sums to {sums[j]:.12g}, expected 1 (within {SIMPLEX_ATOL:g}); "
                                f"{bad.size} row(s) off the simplex")
    P = sp.csr_matrix(sp.diags(1.0 / sums) @ P)
    P.sort_indices()
    return P


def _as_weights(weights, m: int) -> np.ndarray:
    if weights is None:
        return np.full(m, 1.0 / m)
    try:
        pi = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DistributionError(f"weights: expected a numeric array of shape ({m},) ({exc})") from None
    if pi.ndim != 1:
        raise ShapeError(f"weights: expected a 1-D array of length {m}, got shape {pi.shape}")
    if not np.all(np.isfinite(pi)):
        raise DistributionError(f"weights: entries must be finite; entry {int(np.flatnonzero(~np.isfinite(pi))[0])} "
                                "is not")
    if pi.shape != (m,):
        raise ShapeError(f"weights: expected shape ({m},) (one per context), got {pi.shape}")
    if np.any(pi <= 0):
        j = int(np.flatnonzero(pi <= 0)[0])
        raise DistributionError(f"weights: entry {j} is {pi[j]}; context weights must be strictly positive")
    if abs(pi.sum() - 1.0) > SIMPLEX_ATOL:
        raise DistributionError(f"weights: sum to {pi.sum():.12g}, expected 1 (within {SIMPLEX_ATOL:g})")
    return pi / pi.sum()


def _as_labels(name: str, labels, n: int) -> list[str] | None:
    if labels is None:
        return None
    labels = [str(s) for s in labels]
    if len(labels) != n:
        raise ShapeError(f"{name}: expected {n} labels, got {len(labels)}")
    return labels


def _as_sequences(tokens) -> list[list[int]]:
    if isinstance(tokens, (str, bytes)):
        raise InputError("tokens: expected a list of integer sequences, got a string")
    seqs = []
    for i, seq in enumerate(tokens):
        arr = np.asarray(seq)
        if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
            raise InputError(f"tokens: sequence {i} must be a 1-D sequence of integers, got {arr.dtype} "
                             f"with shape {arr.shape}")
        if arr.size and arr.min() < 0:
            raise InputError(f"tokens: sequence {i} has a negative token id {arr.min()}")
        seqs.append(arr.astype(np.int64).tolist())
    if not seqs:
        raise InputError("tokens: no sequences given")
    return seqs


def _embed_contexts(embed, contexts: list[tuple[int, ...]], seed: int) -> np.ndarray:
    m = len(contexts)
    if callable(embed):
        return _check_embedding_output(embed(contexts), m)
    if embed == "onehot":
        check_dense_size("one-hot context embeddings", (m, m), "use embed='random:D' with D < m")
        return np.eye(m)
    if isinstance(embed, str) and embed.startswith("random:"):
        try:
            D = int(embed.split(":", 1)[1])
        except ValueError:
            raise InputError(f"embed: expected 'random:D' with an integer D, got {embed!r}") from None
        D = check_positive_int("embed dimension D", D)
        return make_rng(seed).standard_normal((m, D))
    raise InputError(f"embed: expected 'onehot', 'random:D' or a callable, got {embed!r}")


def _check_embedding_output(H, m: int) -> np.ndarray:
    H = as_float_array("embed(contexts)", H, ndim=2)
    if H.shape[0] != m:
        raise ShapeError(f"embed(contexts): expected {m} rows (one per distinct context), got shape {H.shape}")
    return H

