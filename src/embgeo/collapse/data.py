"""The feature-collapse data model: concepts, words, latent sequences and sentences.

Paper: ``feature-collapse.txt`` Sec. 2 ("data model"), Sec. 3 and App. A.3 (notation), Assumption 1
(Sec. 3.1, eq. 6) / Assumption A (App. B.1). The vocabulary has n_c concepts of s_c words each; word (α, β) (β-th word
of concept α) has the 0-based id α·s_c + β. Every concept uses the same within-concept law μ
(``freqs``). Class k is defined by a latent sequence z_k ∈ [n_c]^L, and a sentence of class k
draws, independently at each position ℓ, a word of concept z_{k,ℓ} with law μ:

    D_{z_k}(x) = ∏_ℓ 1{α_ℓ = z_{k,ℓ}} μ_{β_ℓ}.

* :class:`CollapseData`: the latent sequences plus train/test sentences as word ids.
* :func:`generate`: the paper's generator (uniform or Zipf frequencies, random latents), with
  the options "distinct" latents and "all" latents (the fully sampled case of Assumption 1).
* :func:`symmetry_diagnostic`: how far a set of latent sequences is from Assumption 1.

Conventions: 0-based everywhere (concept α ∈ [0, n_c), rank β ∈ [0, s_c), word id α·s_c + β).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from embgeo.core.validate import as_float_array, check_dense_size, check_positive_int, make_rng
from embgeo.errors import DistributionError, InputError, ShapeError, TooLargeError

LATENTS = ("random", "distinct", "all")
#: Largest n_c^L for which ``latent="all"`` enumerates every latent sequence.
MAX_ALL_LATENTS = 2_000_000
#: Tolerance on the sum of an explicit frequency vector (it is then renormalised exactly).
FREQ_ATOL = 1e-8


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class CollapseData:
    """Latent sequences and train/test sentences of the feature-collapse data model.

    Attributes
    ----------
    n_concepts : int
        n_c, the number of concepts.
    words_per_concept : int
        s_c, the number of words per concept (n_w = n_c·s_c).
    length : int
        L, the number of words in a sentence.
    freqs : (s_c,) float64
        μ, the within-concept word law (positive, sums to 1); word (α, β) has frequency μ_β.
    latent : (K, L) int64
        z_k, the latent concept sequence of class k, entries in [0, n_c).
    train_x, test_x : (N, L), (N_test, L) int64
        Sentences as word ids α·s_c + β.
    train_y, test_y : (N,), (N_test,) int64
        Class labels in [0, K).
    meta : dict
        How the data were generated (frequency law, latent mode, seed, samples per class).

    All arrays are read-only.
    """

    n_concepts: int
    words_per_concept: int
    length: int
    freqs: np.ndarray
    latent: np.ndarray
    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        n_c = check_positive_int("n_concepts", self.n_concepts)
        s_c = check_positive_int("words_per_concept", self.words_per_concept)
        L = check_positive_int("length", self.length)
        mu = as_float_array("freqs", self.freqs, ndim=1)
        if mu.shape != (s_c,):
            raise ShapeError(f"freqs: expected shape (words_per_concept,) = ({s_c},), got {mu.shape}")
        Z = np.asarray(self.latent)
        if Z.ndim != 2 or Z.shape[1] != L or Z.shape[0] < 1:
            raise ShapeError(f"latent: expected shape (K, length) = (K, {L}) with K >= 1, got {Z.shape}")
        if not np.issubdtype(Z.dtype, np.integer) or Z.min() < 0 or Z.max() >= n_c:
            raise InputError(f"latent: expected integer entries in [0, n_concepts) = [0, {n_c})")
        K = Z.shape[0]
        for name in ("train", "test"):
            x, y = np.asarray(getattr(self, f"{name}_x")), np.asarray(getattr(self, f"{name}_y"))
            if x.ndim != 2 or x.shape[1] != L:
                raise ShapeError(f"{name}_x: expected shape (N, length) = (N, {L}), got {x.shape}")
            if y.shape != (x.shape[0],):
                raise ShapeError(f"{name}_y: expected shape ({x.shape[0]},) matching {name}_x, got {y.shape}")
            if not (np.issubdtype(x.dtype, np.integer) and np.issubdtype(y.dtype, np.integer)):
                raise InputError(f"{name}_x, {name}_y: expected integer arrays, got {x.dtype}, {y.dtype}")
            if x.size and (x.min() < 0 or x.max() >= n_c * s_c):
                raise InputError(f"{name}_x: word ids must be in [0, n_words) = [0, {n_c * s_c})")
            if y.size and (y.min() < 0 or y.max() >= K):
                raise InputError(f"{name}_y: labels must be in [0, K) = [0, {K})")
            object.__setattr__(self, f"{name}_x", _readonly(x.astype(np.int64, copy=False)))
            object.__setattr__(self, f"{name}_y", _readonly(y.astype(np.int64, copy=False)))
        object.__setattr__(self, "freqs", _readonly(mu))
        object.__setattr__(self, "latent", _readonly(Z.astype(np.int64, copy=False)))
        object.__setattr__(self, "meta", dict(self.meta))

    @property
    def n_words(self) -> int:
        """n_w = n_c·s_c."""
        return self.n_concepts * self.words_per_concept

    @property
    def n_classes(self) -> int:
        """K, the number of latent sequences (classes)."""
        return int(self.latent.shape[0])

    @property
    def word_concept(self) -> np.ndarray:
        """(n_w,) int64: the concept α of each word id."""
        return np.arange(self.n_words, dtype=np.int64) // self.words_per_concept

    @property
    def word_rank(self) -> np.ndarray:
        """(n_w,) int64: the within-concept rank β of each word id (its frequency is μ_β)."""
        return np.arange(self.n_words, dtype=np.int64) % self.words_per_concept

    @property
    def word_freqs(self) -> np.ndarray:
        """(n_w,) float64: μ_β of each word id."""
        return self.freqs[self.word_rank]

    def __repr__(self) -> str:
        return (f"CollapseData(n_c={self.n_concepts}, s_c={self.words_per_concept}, L={self.length}, "
                f"K={self.n_classes}, N_train={len(self.train_y)}, N_test={len(self.test_y)}, "
                f"freqs={self.meta.get('freqs', 'given')!r}, latent={self.meta.get('latent', 'given')!r})")


# -- frequencies and latents ---------------------------------------------------------------------

def make_freqs(freqs: str | tuple | ArrayLike, words_per_concept: int) -> tuple[np.ndarray, str]:
    """The within-concept law μ (s_c,) and a short name for it.

    ``"uniform"``: 1/s_c; ``"zipf"``: μ_β ∝ 1/β (β = 1..s_c); ``("power", s)``: μ_β ∝ 1/β^s
    (s ≥ 0); an explicit vector of s_c positive numbers summing to 1 (within 1e-8).
    """
    s_c = check_positive_int("words_per_concept", words_per_concept)
    ranks = np.arange(1, s_c + 1, dtype=np.float64)
    if isinstance(freqs, str):
        if freqs == "uniform":
            return np.full(s_c, 1.0 / s_c), "uniform"
        if freqs == "zipf":
            w = 1.0 / ranks
            return w / w.sum(), "zipf"
        raise InputError(f"freqs: expected 'uniform', 'zipf', ('power', s) or a vector of {s_c} probabilities, "
                         f"got {freqs!r}")
    if isinstance(freqs, tuple) and len(freqs) == 2 and isinstance(freqs[0], str):
        if freqs[0] != "power":
            raise InputError(f"freqs: expected ('power', s), got {freqs!r}")
        s = freqs[1]
        if isinstance(s, bool) or not isinstance(s, (int, float, np.integer, np.floating)) or not (
                math.isfinite(s) and s >= 0):
            raise InputError(f"freqs: the exponent s of ('power', s) must be a finite number >= 0, got {s!r}")
        w = ranks ** (-float(s))
        return w / w.sum(), f"power({float(s):g})"
    mu = as_float_array("freqs", freqs, ndim=1)
    if mu.shape != (s_c,):
        raise ShapeError(f"freqs: expected {s_c} probabilities (one per word of a concept), got shape {mu.shape}")
    if np.any(mu <= 0):
        raise DistributionError(f"freqs: every frequency must be > 0 (the paper's μ_β > 0), got min {mu.min():g}")
    if abs(mu.sum() - 1.0) > FREQ_ATOL:
        raise DistributionError(f"freqs: must sum to 1 (within {FREQ_ATOL:g}), got sum {mu.sum():.10g}")
    return mu / mu.sum(), "given"


def _n_sequences(n_c: int, L: int) -> int:
    return n_c ** L  # exact python int


def _codes_to_latent(codes: np.ndarray, n_c: int, L: int) -> np.ndarray:
    """Base-n_c digits of ``codes`` (most significant first): (len(codes), L) int64."""
    powers = n_c ** np.arange(L - 1, -1, -1, dtype=np.int64)
    return (codes[:, None] // powers[None, :]) % n_c


def _check_all(n_c: int, L: int, K: int) -> None:
    total = _n_sequences(n_c, L)
    if total > MAX_ALL_LATENTS:
        raise TooLargeError(f"latent: 'all' would enumerate n_concepts^length = {n_c}^{L} = {total} sequences "
                            f"(limit {MAX_ALL_LATENTS}); use latent='random' or 'distinct' with fewer classes")
    if K != total:
        raise InputError(f"n_classes: latent='all' uses every latent sequence, so K must equal "
                         f"n_concepts^length = {n_c}^{L} = {total}, got {K}")


def make_latent(n_concepts: int, length: int, n_classes: int, latent: str, rng: np.random.Generator) -> np.ndarray:
    """K latent sequences (K, L) int64; see :func:`generate` for the modes."""
    n_c, L, K = n_concepts, length, n_classes
    total = _n_sequences(n_c, L)
    if latent == "random":
        return rng.integers(0, n_c, size=(K, L), dtype=np.int64)
    if latent == "distinct":
        if K > total:
            raise InputError(f"n_classes: latent='distinct' needs K <= n_concepts^length = {total}, got {K}")
        if total <= 4 * K:  # dense case: sample codes without replacement
            return _codes_to_latent(rng.choice(total, size=K, replace=False).astype(np.int64), n_c, L)
        Z = rng.integers(0, n_c, size=(K, L), dtype=np.int64)
        while True:  # rejection: redraw the later copies of duplicated rows
            _, first = np.unique(Z, axis=0, return_index=True)
            dup = np.setdiff1d(np.arange(K), first)
            if dup.size == 0:
                return Z
            Z[dup] = rng.integers(0, n_c, size=(dup.size, L), dtype=np.int64)
    if latent == "all":
        _check_all(n_c, L, K)
        return _codes_to_latent(np.arange(total, dtype=np.int64), n_c, L)
    raise InputError(f"latent: expected one of {LATENTS}, got {latent!r}")


def sample_sentences(latent: np.ndarray, freqs: np.ndarray, per_class: int,
                     rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``per_class`` sentences of every class: word ids (K·per_class, L), labels (K·per_class,).

    Sentences are grouped by class (class 0 first). Word ranks are drawn with ``rng.choice``
    with probabilities ``freqs``; the concept at position ℓ of a class-k sentence is z_{k,ℓ}.
    """
    K, L = latent.shape
    s_c = len(freqs)
    y = np.repeat(np.arange(K, dtype=np.int64), per_class)
    ranks = rng.choice(s_c, size=(len(y), L), p=freqs).astype(np.int64)
    x = latent[y] * s_c + ranks
    return x, y


def generate(n_concepts: int = 3, words_per_concept: int = 400, length: int = 15, n_classes: int = 1000,
             freqs: str | tuple | ArrayLike = "uniform", n_train_per_class: int = 5, n_test_per_class: int = 5,
             latent: str = "random", seed: int | np.random.Generator = 0) -> CollapseData:
    """Sample a feature-collapse data set (paper Sec. 2 and App. A.3).

    Parameters
    ----------
    n_concepts, words_per_concept, length, n_classes : int
        n_c, s_c, L and K. The paper: 3, 400, 15, 1000.
    freqs : "uniform" | "zipf" | ("power", s) | array (s_c,)
        Within-concept law μ: 1/s_c; μ_β ∝ 1/β (Fig. 4); μ_β ∝ 1/β^s; or explicit.
    n_train_per_class, n_test_per_class : int
        n_spl, sentences per class (the paper: 5 or 500 for training, 5 for testing; test ≥ 0).
    latent : {"random", "distinct", "all"}
        * ``random``: every entry of z_k i.i.d. uniform on [0, n_c) — the paper's way;
          duplicated sequences (indistinguishable classes) are possible.
        * ``distinct``: as random, rejecting duplicates (needs K ≤ n_c^L).
        * ``all``: all n_c^L sequences in lexicographic order (K must equal n_c^L), the fully
          sampled case in which Assumption 1 holds exactly.
    seed : int or numpy Generator
        Draws latents, then training sentences, then test sentences (fresh draws from the same
        latent sequences).

    Returns
    -------
    CollapseData

    Examples
    --------
    >>> d = generate(3, 4, 5, 3, n_train_per_class=2, seed=0)
    >>> d.train_x.shape, d.n_words, bool(np.all(d.word_concept[d.train_x] == d.latent[d.train_y]))
    ((6, 5), 12, True)
    """
    n_c = check_positive_int("n_concepts", n_concepts)
    s_c = check_positive_int("words_per_concept", words_per_concept)
    L = check_positive_int("length", length)
    K = check_positive_int("n_classes", n_classes)
    n_tr = check_positive_int("n_train_per_class", n_train_per_class)
    n_te = check_positive_int("n_test_per_class", n_test_per_class, 0)
    if not isinstance(latent, str) or latent not in LATENTS:
        raise InputError(f"latent: expected one of {LATENTS}, got {latent!r}")
    mu, freq_name = make_freqs(freqs, s_c)
    rng = make_rng(seed)
    if latent == "all":
        _check_all(n_c, L, K)
    check_dense_size("n_classes × n_train_per_class training sentences", (K * n_tr, L),
                     "use fewer classes or sentences per class")
    Z = make_latent(n_c, L, K, latent, rng)
    train_x, train_y = sample_sentences(Z, mu, n_tr, rng)
    test_x, test_y = sample_sentences(Z, mu, n_te, rng)
    meta = {"freqs": freq_name, "latent": latent, "n_train_per_class": n_tr, "n_test_per_class": n_te,
            "seed": seed if isinstance(seed, (int, np.integer)) else "generator"}
    return CollapseData(n_c, s_c, L, mu, Z, train_x, train_y, test_x, test_y, meta)


# -- Assumption 1 --------------------------------------------------------------------------------

@dataclass(frozen=True)
class SymmetryReport:
    """Deviation of latent sequences from Assumption 1 (Sec. 3.1, eq. 6; Assumption A in App. B.1).

    Attributes
    ----------
    max_rel_deviation, mean_rel_deviation : float
        Max and mean over (k, r, ℓ, α) (r = 1..L, entries with a positive ideal value) of
        |count − ideal| / ideal. Both are 0 exactly when Assumption 1 holds.
    n_duplicate_pairs : int
        Number of pairs k < k' with z_k = z_k' (indistinguishable classes).
    n_classes : int
        K.
    """

    max_rel_deviation: float
    mean_rel_deviation: float
    n_duplicate_pairs: int
    n_classes: int

    @property
    def exact(self) -> bool:
        """True when the counts equal their ideal values (Assumption 1 holds)."""
        return self.max_rel_deviation == 0.0


def symmetry_diagnostic(latent: ArrayLike, n_concepts: int) -> SymmetryReport:
    """How far latent sequences are from Assumption 1 (latent symmetry; paper eq. 6/35).

    For every k, r ∈ {1..L}, ℓ, α the count |{k' : dist(z_k, z_k') = r, z_{k',ℓ} = α}| is
    compared with its ideal value (K/n_c^L)·C(L−1, r)(n_c−1)^r if z_{k,ℓ} = α, else
    (K/n_c^L)·C(L−1, r−1)(n_c−1)^{r−1} (dist = Hamming distance). Exactly 0 for all n_c^L
    sequences (``generate(latent="all")``).

    Cost: a dense K × K distance matrix (refused above the memory budget) and L products of
    size (K × K)·(K × L·n_c).
    """
    n_c = check_positive_int("n_concepts", n_concepts)
    Z = np.asarray(latent)
    if Z.ndim != 2 or Z.shape[0] < 1 or Z.shape[1] < 1:
        raise ShapeError(f"latent: expected a (K, L) array with K, L >= 1, got shape {Z.shape}")
    if not np.issubdtype(Z.dtype, np.integer) or Z.min() < 0 or Z.max() >= n_c:
        raise InputError(f"latent: expected integer entries in [0, n_concepts) = [0, {n_c})")
    K, L = Z.shape
    check_dense_size("symmetry_diagnostic distance matrix", (K, K), "use fewer latent sequences")
    onehot = np.zeros((K, L, n_c))
    onehot[np.arange(K)[:, None], np.arange(L)[None, :], Z] = 1.0
    onehot = onehot.reshape(K, L * n_c)
    dist = np.rint(L - onehot @ onehot.T).astype(np.int64)  # Hamming distances (K, K)
    n_dup = int((np.count_nonzero(dist == 0) - K) // 2)
    # ideal counts: scale · C(L-1, r)(n_c-1)^r (same concept) or scale · C(L-1, r-1)(n_c-1)^(r-1)
    same_ideal = np.array([math.comb(L - 1, r) * (n_c - 1) ** r for r in range(1, L + 1)], dtype=np.float64)
    diff_ideal = np.array([math.comb(L - 1, r - 1) * (n_c - 1) ** (r - 1) for r in range(1, L + 1)],
                          dtype=np.float64)
    scale = K / n_c ** L  # exact int division, correctly rounded (1.0 for all n_c^L sequences)
    same_ideal *= scale
    diff_ideal *= scale
    same = onehot.reshape(K, L, n_c).astype(bool)  # z_{k,ℓ} == α
    max_dev, sum_dev, n_terms = 0.0, 0.0, 0
    for i, r in enumerate(range(1, L + 1)):
        counts = ((dist == r).astype(np.float64) @ onehot).reshape(K, L, n_c)
        ideal = np.where(same, same_ideal[i], diff_ideal[i])
        pos = ideal > 0
        if not np.all(counts[~pos] == 0):  # cannot happen (dist = L forces a different concept); kept as a check
            max_dev = math.inf
        dev = np.abs(counts[pos] - ideal[pos]) / ideal[pos]
        if dev.size:
            max_dev = max(max_dev, float(dev.max()))
            sum_dev += float(dev.sum())
            n_terms += dev.size
    return SymmetryReport(max_rel_deviation=max_dev, mean_rel_deviation=sum_dev / max(n_terms, 1),
                          n_duplicate_pairs=n_dup, n_classes=K)
