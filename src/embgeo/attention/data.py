"""Token statistics and data generators of the attention paper.

Paper: ``attention-trained-embeddings.txt`` (readings and errata: ``docs/papers/attention/readings.rst``).

Conventions
-----------
- A dataset is ``X`` (n, T) of integer token ids in ``[0, vocab_size)`` and labels ``y`` (n,) in
  {−1, +1}. Padding follows the package convention (:mod:`embgeo.attention`): variable-length
  sequences are right- (or anywhere-) padded with ``pad_id``; entries equal to ``pad_id`` are
  ignored everywhere (they are not tokens).
- ``pad_id`` may lie inside ``[0, vocab_size)`` (then that id gets count 0, α = 0) or outside
  it (e.g. −1). :func:`check_pad_id` and :func:`check_dataset` are the checks every module uses.

Contents
--------
- :func:`token_counts` — occurrences of every token in positive / negative sequences.
- :func:`signed_frequency` — α_s of eq. (3).
- :func:`posterior_difference` — p(1|s) − p(0|s) of eq. (18).
- :func:`level_sizes`, :func:`level_token_law`, :func:`synthetic_levels` — the K-level model of
  eqs. (14)-(16) (Figure 2), with both readings of its errata.
- :func:`assumption1_data` — data satisfying Assumption 1 exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from embgeo.core.validate import as_float_array, check_dense_size, check_positive_int, make_rng
from embgeo.errors import InputError, ShapeError

#: δ_k of Figure 2 (paper Sec. 5), k = 1..8.
PAPER_DELTAS = (0.45, 0.35, 0.3, 0.25, 0.2, 0.1, 0.05, 0.02)
#: δ̃ of Figure 2.
PAPER_DELTA_TILDE = 0.05
#: |S̃| of Figure 2.
PAPER_N_IRRELEVANT = 964

READINGS = ("corrected", "printed")


# -- validation ---------------------------------------------------------------------------------

def check_pad_id(pad_id: int | None) -> int | None:
    """``pad_id`` as an int, or None (no padding); bools, floats and strings are refused."""
    if pad_id is None:
        return None
    if isinstance(pad_id, bool) or not isinstance(pad_id, (int, np.integer)):
        raise InputError(f"pad_id: expected an integer or None, got {pad_id!r}")
    return int(pad_id)


def check_dataset(X: ArrayLike, y: ArrayLike, vocab_size: int, pad_id: int | None = None
                  ) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """Validate a dataset; return (X int64 (n, T), y int64 (n,) in ±1, vocab_size, real (n, T) bool).

    ``real`` is True at the entries that are tokens (``X != pad_id``). Raises :class:`ShapeError`
    on a ragged or non-2-D ``X`` or a ``y`` of the wrong length, and :class:`InputError` naming
    ``X``, ``y`` or ``pad_id`` otherwise (ids outside ``[0, vocab_size)``, labels not ±1, no token).
    """
    vocab_size = check_positive_int("vocab_size", vocab_size)
    try:
        X = np.asarray(X)
    except ValueError as exc:  # ragged nested lists
        raise ShapeError(f"X: expected a rectangular (n, T) integer array; pad variable-length "
                         f"sequences with pad_id ({exc})") from None
    if X.dtype == object:
        raise ShapeError("X: expected a rectangular (n, T) integer array; pad variable-length "
                         "sequences with pad_id")
    if X.dtype.kind not in "iu":
        raise InputError(f"X: expected an integer array of token ids, got dtype {X.dtype}")
    if X.ndim != 2:
        raise ShapeError(f"X: expected a 2-D (n, T) array, got shape {X.shape}")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ShapeError(f"X: expected at least one sequence and one position, got shape {X.shape}")
    X = X.astype(np.int64, copy=False)

    pad_id = check_pad_id(pad_id)
    if pad_id is not None:
        mask = X != pad_id
    else:
        mask = np.ones(X.shape, dtype=bool)
    real = X[mask]
    if real.size == 0:
        raise InputError("X: every entry equals pad_id; there are no tokens to count")
    bad = (real < 0) | (real >= vocab_size)
    if np.any(bad):
        value = int(real[np.argmax(bad)])
        raise InputError(f"X: token ids must lie in [0, vocab_size={vocab_size})"
                         f"{'' if pad_id is None else f' or equal pad_id={pad_id}'}; found {value}")

    if isinstance(y, np.ndarray) and y.dtype == bool:
        raise InputError("y: expected labels in {-1, +1}, got a boolean array")
    y = as_float_array("y", y, ndim=1)
    if y.shape[0] != X.shape[0]:
        raise ShapeError(f"y: expected {X.shape[0]} labels (one per row of X), got {y.shape[0]}")
    wrong = (y != 1.0) & (y != -1.0)
    if np.any(wrong):
        values = sorted({float(v) for v in y[wrong]})[:5]
        hint = " (map 0/1 labels with y = 2*y - 1)" if set(values) <= {0.0} else ""
        raise InputError(f"y: expected labels in {{-1, +1}}, found {values}{hint}")
    return X, y.astype(np.int64), vocab_size, mask


# -- token statistics ---------------------------------------------------------------------------

def token_counts(X: ArrayLike, y: ArrayLike, vocab_size: int,
                 pad_id: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Occurrences of every token in positive and in negative sequences.

    Parameters
    ----------
    X : int array (n, T)
        Token ids; entries equal to ``pad_id`` are ignored.
    y : array (n,)
        Labels in {−1, +1}.
    vocab_size : int
        |S|; ids must lie in ``[0, vocab_size)``.
    pad_id : int, optional
        Padding id.

    Returns
    -------
    pos, neg : int64 arrays (vocab_size,)
        ``pos[s] = Σ_{(X,y): y=+1} Σ_i 1{x_i=s}`` and likewise for y = −1. Repeated occurrences
        count with multiplicity.
    """
    X, y, vocab_size, mask = check_dataset(X, y, vocab_size, pad_id)
    pos_rows = (y == 1)[:, None] & mask
    neg_rows = (y == -1)[:, None] & mask
    pos = np.bincount(X[pos_rows], minlength=vocab_size).astype(np.int64)
    neg = np.bincount(X[neg_rows], minlength=vocab_size).astype(np.int64)
    return pos, neg


def signed_frequency(X: ArrayLike, y: ArrayLike, vocab_size: int, pad_id: int | None = None) -> np.ndarray:
    """Average signed frequency α_s of eq. (3), for every token.

    ``α_s = (1/N) Σ_{(X,y)} y Σ_i 1{x_i = s}``: occurrences of s in positive sequences minus its
    occurrences in negative sequences, divided by the total number of tokens N. Without padding
    N = nT exactly as in the paper; with padding N is the number of non-pad entries (the actual
    token count; our reading, the paper's sequences all have length T), so ``Σ_s |α_s| ≤ 1`` still holds.

    Returns a float64 array (vocab_size,). Tokens that never occur (and ``pad_id``) get 0.
    """
    pos, neg = token_counts(X, y, vocab_size, pad_id)
    total = int(pos.sum() + neg.sum())
    return (pos - neg).astype(np.float64) / total


def posterior_difference(X: ArrayLike, y: ArrayLike, vocab_size: int, pad_id: int | None = None) -> np.ndarray:
    """Posterior difference p(1|s) − p(0|s) of eq. (18), for every token.

    ``(Σ_{(X,y)} y Σ_i 1{x_i=s}) / (Σ_{(X,y)} Σ_i 1{x_i=s})`` = (pos − neg)/(pos + neg) ∈ [−1, 1].
    It differs from α_s (eq. 3) only in the normalisation: by the count of s instead of the
    total number of tokens.

    Tokens that never occur (0/0) get **0**, never NaN, so later arithmetic stays finite; use
    :func:`token_counts` to tell them apart from tokens seen equally often in both classes.

    Returns a float64 array (vocab_size,).
    """
    pos, neg = token_counts(X, y, vocab_size, pad_id)
    count = pos + neg
    out = np.zeros(pos.shape[0], dtype=np.float64)
    seen = count > 0
    out[seen] = (pos[seen] - neg[seen]) / count[seen]
    return out


# -- K-level synthetic model (eqs. 14-16, Figure 2) ---------------------------------------------

class LevelData(NamedTuple):
    """Output of :func:`synthetic_levels`."""

    X: np.ndarray
    """(n, T) int64 token ids."""
    y: np.ndarray
    """(n,) int64 labels in {−1, +1}."""
    levels: np.ndarray
    """(vocab_size,) int64 signed level of each token: 0 for S̃ (irrelevant), +k for S_k^{+1},
    −k for S_k^{−1} (k = 1..K)."""


def _check_reading(reading: str) -> str:
    if reading not in READINGS:
        raise InputError(f"reading: expected one of {READINGS}, got {reading!r}")
    return reading


def level_sizes(K: int = 8, reading: str = "corrected") -> np.ndarray:
    """|S_k^{+1}| = |S_k^{−1}| for k = 1..K.

    - ``"corrected"`` (default): 4 + 2^k. With K = 8 and |S̃| = 964 this gives
      964 + 2·542 = 2048 = |S| as stated in the paper.
    - ``"printed"``: 4 + 2^{k−1} as printed in Sec. 5; then 964 + 2·287 = 1538 ≠ 2048.
    """
    K = check_positive_int("K", K)
    _check_reading(reading)
    k = np.arange(1, K + 1, dtype=np.int64)
    return 4 + 2 ** (k if reading == "corrected" else k - 1)


def _level_setup(K, n_irrelevant, deltas, delta_tilde, reading, sizes):
    reading = _check_reading(reading)
    K = check_positive_int("K", K)
    n_irrelevant = check_positive_int("n_irrelevant", n_irrelevant)
    deltas = as_float_array("deltas", deltas, ndim=1)
    if deltas.shape[0] != K:
        raise ShapeError(f"deltas: expected K={K} values δ_1..δ_K, got {deltas.shape[0]}")
    if np.any((deltas <= 0) | (deltas >= 1)):
        raise InputError(f"deltas: expected values in (0, 1), got {deltas.tolist()}")
    delta_tilde = float(as_float_array("delta_tilde", delta_tilde, ndim=0))
    if not 0 < delta_tilde < 1:
        raise InputError(f"delta_tilde: expected a value in (0, 1), got {delta_tilde}")
    if sizes is None:
        sizes = level_sizes(K, reading)
    else:
        sizes = np.asarray([check_positive_int(f"sizes[{i}]", s) for i, s in enumerate(sizes)], dtype=np.int64)
        if sizes.shape[0] != K:
            raise ShapeError(f"sizes: expected K={K} level sizes, got {sizes.shape[0]}")
    # Vocabulary layout: [S̃ | S_1^{+1} S_1^{-1} | S_2^{+1} S_2^{-1} | ... ].
    levels = [np.zeros(n_irrelevant, dtype=np.int64)]
    for k in range(1, K + 1):
        levels.append(np.full(sizes[k - 1], k, dtype=np.int64))
        levels.append(np.full(sizes[k - 1], -k, dtype=np.int64))
    return reading, deltas, delta_tilde, sizes, np.concatenate(levels)


def level_token_law(K: int = 8, n_irrelevant: int = PAPER_N_IRRELEVANT,
                    deltas: Sequence[float] = PAPER_DELTAS, delta_tilde: float = PAPER_DELTA_TILDE,
                    reading: str = "corrected", sizes: Sequence[int] | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The per-position token law p(s|y) of eq. (15).

    With N = Σ_k |S_k^y| (= Σ_k |S_k^{¬y}|, the two classes have equal level sizes):

    - s ∈ S̃: (1 − δ̃)/|S̃|
    - s ∈ S_k^y: δ̃(1 − δ_k)/N
    - s ∈ S_k^{¬y}: δ̃·δ_k/N (``"corrected"``) or δ_k/N as printed (``"printed"``).

    The corrected law sums to 1 and gives the posterior (16), p(y|s) = 1 − δ_k on S_k^y. The
    printed third line is missing the δ̃ factor: its total mass is 1 + (1 − δ̃)Σ_k|S_k|δ_k/N > 1,
    so under ``"printed"`` the law is renormalised to sum to 1 (the only way to sample from it);
    its posterior is then δ̃(1−δ_k)/(δ̃(1−δ_k)+δ_k), not 1 − δ_k. ``reading`` also selects the
    default level sizes (:func:`level_sizes`); pass ``sizes`` to override them.

    Returns
    -------
    probs : float64 array (2, vocab_size)
        Row 0 is p(·|y=−1), row 1 is p(·|y=+1); each sums to 1.
    levels : int64 array (vocab_size,)
        Signed level labels as in :class:`LevelData`.
    """
    reading, deltas, delta_tilde, sizes, levels = _level_setup(K, n_irrelevant, deltas, delta_tilde, reading, sizes)
    N = float(sizes.sum())
    probs = np.empty((2, levels.shape[0]), dtype=np.float64)
    k_abs = np.abs(levels)
    d_k = np.where(k_abs > 0, deltas[np.maximum(k_abs, 1) - 1], 0.0)
    other = delta_tilde if reading == "corrected" else 1.0
    for row, label in ((0, -1), (1, 1)):
        same = levels * label > 0
        opposite = levels * label < 0
        p = np.full(levels.shape[0], (1.0 - delta_tilde) / n_irrelevant)
        p[same] = delta_tilde * (1.0 - d_k[same]) / N
        p[opposite] = other * d_k[opposite] / N
        probs[row] = p / p.sum()
    return probs, levels


def synthetic_levels(n: int, *, seed: int | np.random.Generator, T: int = 256, K: int = 8,
                     n_irrelevant: int = PAPER_N_IRRELEVANT,
                     deltas: Sequence[float] = PAPER_DELTAS, delta_tilde: float = PAPER_DELTA_TILDE,
                     reading: str = "corrected", sizes: Sequence[int] | None = None) -> LevelData:
    """Sample n sequences of the K-level model (eqs. 14-16), the data of Figure 2.

    Defaults are the paper's Figure-2 values (|S̃| = 964, K = 8, T = 256, δ̃ = 0.05, δ_k as in
    :data:`PAPER_DELTAS`). ``reading="corrected"`` (default) fixes both errata of the printed
    spec: level sizes 4 + 2^k (so |S| = 2048, as the paper states) and the δ̃ factor in the third
    line of (15) (so the law is normalised and the posterior is (16)). ``reading="printed"``
    uses 4 + 2^{k−1} (|S| = 1538) and the printed third line, renormalised (see
    :func:`level_token_law`).

    Not specified by the paper, chosen here: labels i.i.d. uniform on {−1, +1}; tokens i.i.d.
    across positions from p(·|y); no padding. Vocabulary layout: ids ``0..|S̃|−1`` are S̃, then
    S_1^{+1}, S_1^{−1}, S_2^{+1}, ... (see ``levels``).

    Returns :class:`LevelData` ``(X, y, levels)``; ``len(levels)`` is the vocabulary size.
    """
    n = check_positive_int("n", n)
    T = check_positive_int("T", T)
    rng = make_rng(seed)
    probs, levels = level_token_law(K, n_irrelevant, deltas, delta_tilde, reading, sizes)
    check_dense_size("synthetic_levels X", (n, T), hint="sample fewer sequences at a time")
    y = np.where(rng.random(n) < 0.5, -1, 1).astype(np.int64)
    X = np.empty((n, T), dtype=np.int64)
    V = levels.shape[0]
    for row, label in ((0, -1), (1, 1)):
        idx = np.flatnonzero(y == label)
        X[idx] = rng.choice(V, size=(idx.shape[0], T), p=probs[row])
    return LevelData(X, y, levels)


# -- Assumption 1 -------------------------------------------------------------------------------

class Assumption1Data(NamedTuple):
    """Output of :func:`assumption1_data`."""

    X: np.ndarray
    """(n, T) int64 token ids, n = 2·n_pairs."""
    y: np.ndarray
    """(n,) int64 labels in {−1, +1}; exactly n_pairs of each."""
    important: np.ndarray
    """Sorted int64 ids of S_c, the completely positive and completely negative tokens."""


def assumption1_data(n_pairs: int, T: int, *, seed: int | np.random.Generator, n_irrelevant: int = 8,
                     n_positive: int = 1,
                     n_negative: int = 1) -> Assumption1Data:
    """Data satisfying Assumption 1 exactly (paper Sec. 4).

    Assumption 1: each sequence contains either a single completely positive token or a single
    completely negative token (its sign agrees with the label), and all remaining tokens are
    irrelevant (α_s = 0). Consequences checked by the tests: α_s = 0 exactly for every
    irrelevant token; for s ∈ S_c, y·α_s = (occurrences of s)/(nT) ≥ 1/(nT) (> 0 for completely
    positive, < 0 for completely negative) and the posterior difference (18) is exactly ±1.

    Construction (the paper gives none; this one is ours): sequences come in (positive, negative)
    pairs that share the same multiset of T − 1 irrelevant tokens (drawn uniformly, then shuffled
    independently in each member); each member gets one important token of its sign, inserted
    at a uniformly random position. Equal counts in the two classes make α_s = 0 exactly for
    irrelevant tokens. Every important token is used at least once (needs ``n_positive`` and
    ``n_negative`` ≤ ``n_pairs``). The 2·n_pairs sequences are returned in random order.

    Vocabulary layout: ids ``0..n_irrelevant−1`` irrelevant, then ``n_positive`` completely
    positive, then ``n_negative`` completely negative tokens; vocab_size is their sum.
    """
    n_pairs = check_positive_int("n_pairs", n_pairs)
    T = check_positive_int("T", T, minimum=2)
    n_irrelevant = check_positive_int("n_irrelevant", n_irrelevant)
    n_positive = check_positive_int("n_positive", n_positive)
    n_negative = check_positive_int("n_negative", n_negative)
    for name, value in (("n_positive", n_positive), ("n_negative", n_negative)):
        if value > n_pairs:
            raise InputError(f"{name}: expected at most n_pairs={n_pairs} (each important token must "
                             f"occur in some sequence), got {value}")
    rng = make_rng(seed)
    check_dense_size("assumption1_data X", (2 * n_pairs, T), hint="use fewer pairs")

    pos_ids = n_irrelevant + np.arange(n_positive, dtype=np.int64)
    neg_ids = n_irrelevant + n_positive + np.arange(n_negative, dtype=np.int64)
    pos_tok = pos_ids[rng.permutation(np.arange(n_pairs) % n_positive)]
    neg_tok = neg_ids[rng.permutation(np.arange(n_pairs) % n_negative)]

    shared = rng.integers(0, n_irrelevant, size=(n_pairs, T - 1), dtype=np.int64)
    X = np.empty((2 * n_pairs, T), dtype=np.int64)
    for half, important in ((0, pos_tok), (1, neg_tok)):
        rest = rng.permuted(shared, axis=1)
        where = rng.integers(0, T, size=n_pairs)
        for j in range(n_pairs):
            X[half * n_pairs + j] = np.insert(rest[j], where[j], important[j])
    y = np.concatenate([np.ones(n_pairs, dtype=np.int64), -np.ones(n_pairs, dtype=np.int64)])
    order = rng.permutation(2 * n_pairs)
    return Assumption1Data(X[order], y[order], np.concatenate([pos_ids, neg_ids]))
