"""The NTP training set in the paper's eq. (2) view, and its generators.

Paper: ``ntp-implicit-bias-neurips.txt`` Sec. 2 (notation of the long version). The n training
pairs (context, next token) are summarised by the m *distinct* contexts: their embeddings
h̄_j ∈ R^d, their empirical weights π̂_j and their sparse next-token distributions p̂_j ∈ Δ^{V-1}.
The loss (2) depends on the data only through these, so that is what :class:`NTPData` holds.

Conventions: ``embeddings`` is (m, d) with one context per *row* (the paper's H̄ is its
transpose); token ids are 0-based (the paper's word 1 is token 0).

Real data: :func:`read_text_file` turns raw text into word-id sequences (one per line, with an
optional vocabulary limit and ``<unk>``), :func:`read_token_file` reads integer ids, and
:meth:`NTPData.from_sequences` counts their training pairs (last token, sliding windows or all
prefixes) with numpy, so a million-token text loads in seconds.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from itertools import chain
from os import PathLike

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike

from embgeo.core.validate import as_float_array, check_dense_size, check_positive_int, make_rng
from embgeo.errors import DistributionError, InputError, ShapeError, TooLargeError
from embgeo.text.reading import WORD_PATTERN, WORD_RE, read_utf8
from embgeo.text.reading import split_words as split_words  # re-exported: the words of read_text_file

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
        self.anchors = _row_argmax_tokens(P)
        self.token_labels = _as_labels("token_labels", token_labels, V)
        self.context_labels = _as_labels("context_labels", context_labels, m)
        #: The distinct contexts as token tuples, when built by :meth:`from_sequences`.
        self.contexts: list[tuple[int, ...]] | None = None
        #: Number of training pairs n behind π̂ and p̂, when known.
        self.n_samples: int | None = None
        #: Sequences :meth:`from_sequences` skipped as too short for any training pair.
        self.n_skipped_sequences: int | None = None

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
    def from_sequences(cls, tokens: Iterable[Sequence[int]], context_length: int,
                       embed: str | Callable[[list[tuple[int, ...]]], ArrayLike] = "onehot", *,
                       autoregressive: bool = False, windows: bool = False, vocab_size: int | None = None,
                       token_labels: Sequence[str] | None = None, seed: int = 0) -> NTPData:
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
            last token predicted from the k tokens before it.
        embed : "onehot" | "random:D" | callable
            Context embeddings: one-hot per distinct context (d = m); seeded i.i.d. N(0, 1)
            vectors of dimension D; or a callable mapping the list of distinct context tuples
            to an (m, d) array.
        autoregressive : bool
            All-prefix setting (paper App. C): each sequence gives the pairs
            (z_{<t}, z_t) for t = 1..min(k, len-1), so contexts have lengths 1..k.
        windows : bool
            Sliding-window setting (the usual one for running text): every window of k+1
            consecutive tokens of a sequence gives a pair (its first k tokens, its last token).
            Exclusive with ``autoregressive``.
        vocab_size : int, optional
            V; defaults to ``len(token_labels)`` if given, else to max token id + 1.
        token_labels : sequence of str, optional
            Names of the V tokens (e.g. the words of :func:`read_text_file`); context labels
            are then the tokens' names joined by spaces instead of their ids.
        seed : int
            Seed of the "random:D" embeddings.

        Sequences too short for any pair (fewer than k+1 tokens; fewer than 2 when
        autoregressive) are skipped and counted in ``data.n_skipped_sequences``; an error is
        raised only when no pair is left.

        Cost: O(n k) numpy work for n pairs plus O(n log n) to deduplicate contexts; nothing of
        size m × V is built (probs is sparse). The sizes are checked before anything is built: a k
        that gives no pair (longer than every sequence) is an :class:`InputError`; an (n, k) array of
        contexts, or V = largest id + 1, above the dense budget a :class:`~embgeo.errors.TooLargeError`;
        nothing of size k is allocated first (k = 10⁹ was 7.7 GB and minutes, issue 37).
        """
        k = check_positive_int("context_length", context_length)
        if autoregressive and windows:
            raise InputError("windows, autoregressive: choose one way to form training pairs, not both")
        flat, lengths = _as_flat_sequences(tokens)
        mode = "autoregressive" if autoregressive else "windows" if windows else "last"
        n_pairs = int(_pairs_per_sequence(lengths, k, mode).sum())
        if n_pairs == 0:
            need = 2 if autoregressive else k + 1
            setting = "the autoregressive setting" if autoregressive else f"context_length={k}"
            raise InputError(f"tokens: no training pairs: all {lengths.size} sequence(s) have fewer than the {need} "
                             f"tokens that {setting} needs (longest: {lengths.max()})")
        # Prefixes are padded to one width, and beyond the longest sequence that is padding only: the width is
        # capped there (the same contexts, without an (n, k) array of -1 for a large k).
        width = min(k, int(lengths.max()) - 1) if mode == "autoregressive" else k
        check_dense_size(f"the training contexts ({n_pairs} pairs × k = {width} tokens)", (n_pairs, width),
                         "use a smaller context_length")
        ctx, nxt, n_skipped = _training_pairs(flat, lengths, width, mode)
        max_token = int(flat.max())
        if vocab_size is not None:
            V = check_positive_int("vocab_size", vocab_size, 2)
            limit = f"vocab_size={V}"
        elif token_labels is not None:
            V = len(token_labels)
            limit = f"the {V} token_labels"
        else:
            V = limit = max_token + 1
        if max_token >= V:
            raise InputError(f"tokens: token id {max_token} is out of range for {limit}")
        # Building probs takes work arrays over the V tokens (the sparse product below), before any answer of
        # size V × d exists to be checked: an id of 10^11 was a MemoryError (std::bad_alloc) here (issue 37).
        check_dense_size(f"tokens: V = {V} tokens (largest id + 1)", (V,),
                         "renumber the ids by frequency (limit_vocabulary; --max-vocab N on the command line)")
        if token_labels is not None and len(token_labels) != V:
            raise ShapeError(f"token_labels: expected {V} labels (one per token), got {len(token_labels)}")

        first, ctx_id = first_seen_rows(ctx)
        m = first.size
        # One count per pair; the CSR constructor sums the duplicate (context, token) entries.
        C = sp.csr_matrix((np.ones(nxt.size), (ctx_id, nxt)), shape=(m, V))
        n_j = np.asarray(C.sum(axis=1)).ravel()
        P = sp.diags(1.0 / n_j) @ C
        contexts = _context_tuples(ctx[first])
        H = _embed_contexts(embed, contexts, seed)
        data = cls(H, P, n_j / n_j.sum(), token_labels=token_labels,
                   context_labels=_context_label_strings(contexts, token_labels))
        data.contexts = contexts
        data.n_samples = int(nxt.size)
        data.n_skipped_sequences = n_skipped
        return data


#: The token that stands for every word (or id) dropped by ``max_vocab``.
UNK = "<unk>"


def read_text_file(path: str | PathLike, max_vocab: int | None = None) -> tuple[list[list[int]], list[str], dict]:
    """Read raw UTF-8 text as word-id sequences: one sequence (sentence) per line.

    Each line is split into words by :func:`split_words` (lowercase, :data:`WORD_PATTERN`);
    lines without any word are ignored. Words get ids by :func:`limit_vocabulary`: most
    frequent first, ties in order of first appearance, and with ``max_vocab=N`` only the N
    most frequent are kept, every other word becoming the one extra token :data:`UNK`.

    Returns
    -------
    sequences : list of lists of int
        Word ids, one list per line that has words.
    vocabulary : list of str
        The word of each id (``vocabulary[i]`` is token i); pass it as ``token_labels`` to
        :meth:`NTPData.from_sequences`.
    info : dict
        ``lines`` (lines with words), ``blank_lines`` (ignored lines), ``tokens`` (word
        occurrences), ``types`` (distinct words), ``max_vocab``, ``unk_tokens`` and
        ``unk_types`` (occurrences and distinct words mapped to UNK), ``word_pattern``.

    Raises :class:`InputError` naming the file if it cannot be read, is not UTF-8 (with the
    line of the first bad byte), or has no word at all.
    """
    lines = read_utf8(path, "text file").lower().replace("\u2019", "'").splitlines()
    words = [WORD_RE.findall(line) for line in lines]
    words = [w for w in words if w]
    if not words:
        raise InputError(f"{path}: no words (the file is empty or nothing in it matches {WORD_PATTERN})")
    sequences, vocabulary, info = limit_vocabulary(words, max_vocab)
    info = {"lines": len(words), "blank_lines": len(lines) - len(words), **info, "word_pattern": WORD_PATTERN}
    return sequences, vocabulary, info


def limit_vocabulary(sequences: Sequence[Sequence], max_vocab: int | None = None) -> tuple[list[list[int]], list,
                                                                                             dict]:
    """Map tokens (words, or integer ids) to ids 0..V-1 by frequency, keeping at most ``max_vocab``.

    Token i is the i-th most frequent token; ties are broken by first appearance (reading the
    sequences in order), so the result is deterministic. With ``max_vocab=N`` and more than N
    distinct tokens, the N most frequent keep their ids 0..N-1 and all others become one extra
    token :data:`UNK` with id N: ``<unk>`` does *not* count within N, so V = N + 1.

    Returns ``(id_sequences, vocabulary, info)``: ``vocabulary[i]`` is the original token of id
    i (or UNK); ``info`` has ``tokens`` (occurrences), ``types`` (distinct tokens),
    ``max_vocab``, and ``unk_tokens`` / ``unk_types``: the occurrences and distinct tokens
    mapped to UNK.
    """
    if max_vocab is not None:
        max_vocab = check_positive_int("max_vocab", max_vocab)
    counts = Counter(chain.from_iterable(sequences))  # insertion order = first appearance
    ranked = sorted(counts, key=lambda tok: -counts[tok])  # stable: ties keep first appearance
    kept = ranked if max_vocab is None else ranked[:max_vocab]
    dropped = ranked[len(kept):]
    ids = {tok: i for i, tok in enumerate(kept)}
    unk_id = len(kept)  # only used when something is dropped
    id_sequences = [[ids.get(tok, unk_id) for tok in seq] for seq in sequences]
    vocabulary = [*kept, UNK] if dropped else list(kept)
    info = {"tokens": sum(counts.values()), "types": len(counts), "max_vocab": max_vocab,
            "unk_tokens": sum(counts[tok] for tok in dropped), "unk_types": len(dropped)}
    return id_sequences, vocabulary, info


_ASCII_INT = re.compile(r"-?[0-9]+")


def read_token_file(path: str | PathLike, max_id: int | None = None) -> list[list[int]]:
    """Read integer token sequences from a UTF-8 text file: one sequence per line, ids separated
    by whitespace; blank lines are skipped. Errors name the file, line and offending text.

    ``max_id``: the largest id accepted. Ids define the vocabulary (V = largest id + 1) and every
    answer has V rows, so the caller passes the largest V its memory allows minus one; a larger id
    is a :class:`~embgeo.errors.TooLargeError` naming its line, before anything of size V exists.
    """
    if max_id is not None:
        max_id = check_positive_int("max_id", max_id, 0)
    seqs = []
    for lineno, line in enumerate(read_utf8(path, "tokens file").splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        # ASCII digits only: int() would also read '٣' and str.isdigit() accepts '²', which int() refuses.
        bad = next((f for f in fields if not _ASCII_INT.fullmatch(f)), None)
        if bad is not None:
            raise InputError(f"{path}:{lineno}: expected integer token ids (ASCII digits), found {bad!r}")
        seq = [int(f) for f in fields]
        if min(seq) < 0:
            raise InputError(f"{path}:{lineno}: negative token id {min(seq)}")
        if max_id is not None and max(seq) > max_id:
            raise TooLargeError(f"{path}:{lineno}: token id {max(seq)} would make V = {max(seq) + 1:,} tokens (V = "
                                f"the largest id + 1; every answer has V rows), above the {max_id + 1:,} that fit the "
                                "memory budget; renumber the ids by frequency with --max-vocab N")
        seqs.append(seq)
    if not seqs:
        raise InputError(f"{path}: no token sequences (the file is empty)")
    return seqs


# -- generators -------------------------------------------------------------------------------

def synthetic(m: int = 50, V: int = 10, d: int = 60, support_size: int = 6, *, alpha: float = 1.0,
              n_samples: int | None = None, embedding_scale: float = 1.0, seed: int = 0) -> NTPData:
    """The random data model of the paper's Figs. 3-4 (App. A.2): defaults are its sizes.

    Each context gets a support of ``support_size`` tokens drawn uniformly without
    replacement, probabilities on it from Dirichlet(alpha) (alpha=1: uniform on the simplex;
    our reading: this matches App. A.2's printed 𝓗 ≈ 1.445 nats while e.g. normalised uniforms do
    not, ``docs/papers/ntp/readings.rst``), and an embedding with i.i.d. N(0, embedding_scale²)
    entries (the paper does not state the distribution or scale; N(0, 1) is our reading).

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
    check_dense_size("embeddings", (m, d))
    rng = make_rng(seed)
    cols = np.empty((m, S), dtype=np.int64)
    vals = np.empty((m, S))
    for j in range(m):  # probabilities first, then the support: the draw order of earlier versions
        vals[j] = rng.dirichlet(np.full(S, float(alpha)))
        cols[j] = rng.choice(V, size=S, replace=False)
    P = sp.csr_matrix((vals.ravel(), cols.ravel(), np.arange(0, m * S + 1, S)), shape=(m, V))
    H = embedding_scale * rng.standard_normal((m, d))
    if n_samples is None:
        return NTPData(H, P)
    n = check_positive_int("n_samples", n_samples)
    check_dense_size("sampled counts", (m, V))
    P = P.toarray()
    ctx_counts = rng.multinomial(n, np.full(m, 1.0 / m))
    counts = np.array([rng.multinomial(c, P[j]) for j, c in enumerate(ctx_counts)], dtype=float)
    seen = ctx_counts > 0
    counts, ctx_counts = counts[seen], ctx_counts[seen]
    data = NTPData(H[seen], counts / ctx_counts[:, None], ctx_counts / n)
    data.n_samples = n
    return data


def synthetic_large(m: int = 20_000, V: int = 5_000, d: int = 64, mean_support: float = 5.0, *,
                    token_law: str = "zipf", alpha: float = 1.0, seed: int = 0) -> NTPData:
    """Sparse next-token data at real-text sizes, for the d ≪ m regime (not a model of the paper).

    Real next-token data have many contexts, few next tokens per context and a few very frequent
    tokens. Here: support sizes S_j from a Zipf law P(S = s) ∝ s^(−a) on 1..V−1, with the exponent
    a set (by bisection) so that the mean support is ``mean_support``; the S_j tokens of a support
    drawn without replacement from a Zipf law P(v) ∝ 1/(v+1) over the vocabulary
    (``token_law="zipf"``, like words) or uniformly (``"uniform"``); probabilities Dirichlet(alpha);
    embeddings N(0, I_d); π̂ uniform. Built sparse: memory O(m (d + mean_support)).
    """
    m = check_positive_int("m", m)
    V = check_positive_int("V", V, 2)
    d = check_positive_int("d", d)
    if not (np.isfinite(mean_support) and 1.0 <= mean_support < V / 2):
        raise InputError(f"mean_support: expected a mean support size in [1, V/2), got {mean_support}")
    if token_law not in ("zipf", "uniform"):
        raise InputError(f"token_law: expected 'zipf' or 'uniform', got {token_law!r}")
    if not (np.isfinite(alpha) and alpha > 0):
        raise InputError(f"alpha: the Dirichlet concentration must be > 0, got {alpha}")
    check_dense_size("embeddings", (m, d))
    rng = make_rng(seed)
    s = np.arange(1, V, dtype=np.float64)
    lo, hi = 0.0, 10.0  # the mean of s^(-a) on 1..V-1 decreases from (V)/2 to 1 as a grows
    for _ in range(200):
        a = 0.5 * (lo + hi)
        q = s ** -a
        lo, hi = (a, hi) if (s @ q) / q.sum() > mean_support else (lo, a)
    q = s ** -a
    sizes = rng.choice(s.astype(np.int64), size=m, p=q / q.sum())
    law = 1.0 / np.arange(1, V + 1) if token_law == "zipf" else np.ones(V)
    law /= law.sum()
    cdf = np.cumsum(law)
    cols, vals = [], []
    for S in sizes:
        draws = np.searchsorted(cdf, rng.random(4 * S + 8) * cdf[-1], side="right")
        tokens, first = np.unique(draws, return_index=True)
        if tokens.size >= S:  # the first S distinct tokens of i.i.d. draws: sampling without replacement
            drawn = tokens[np.argsort(first)[:S]]
        else:  # a long support under a skewed law: numpy's sampling without replacement
            drawn = rng.choice(V, size=S, replace=False, p=law)
        cols.append(np.minimum(drawn, V - 1))
        vals.append(rng.dirichlet(np.full(S, float(alpha))))
    indptr = np.concatenate([[0], np.cumsum(sizes)])
    P = sp.csr_matrix((np.concatenate(vals), np.concatenate(cols), indptr), shape=(m, V))
    return NTPData(rng.standard_normal((m, d)), P)


#: Support pattern of the Fig. 1-2 toy, 0-based (the paper's words 1..5 are tokens 0..4).
#: The captions of Figs. 1 and 2 cannot all hold (``docs/papers/ntp/readings.rst``); this pattern keeps "word 3
#: only follows A" and "words 1 and 5 share a support pattern" (they follow B and C).
TOY2D_SUPPORTS = ((1, 2, 3), (0, 1, 4), (0, 3, 4))


def check_ntp_data(data: object) -> NTPData:
    """``data`` if it is an :class:`NTPData`, else a clear :class:`InputError`."""
    if not isinstance(data, NTPData):
        raise InputError(f"data: expected an embgeo.ntp.NTPData, got {type(data).__name__}")
    return data


#: Angles (degrees) of the toy's contexts A, B, C: cones of 110° (A-B), 120° (B-C) and 130° (C-A),
#: unequal so that Fig. 1's "the wider the cone, the larger ‖w_v‖" can be seen (the paper does not
#: print its coordinates; (90, 210, 330) is the equiangular toy).
TOY2D_ANGLES = (90.0, 200.0, 320.0)


def check_W(data: NTPData, W) -> np.ndarray:
    """W as a float64 array of shape (V, d) for ``data``: a decoder the theory functions can evaluate."""
    W = as_float_array("W", W, ndim=2)
    if W.shape != (data.V, data.d):
        raise ShapeError(f"W: expected shape (V, d) = ({data.V}, {data.d}), got {W.shape}")
    return W


def toy2d(seed: int = 0, angles: tuple = TOY2D_ANGLES) -> NTPData:
    """The 2-D toy of the paper's Figs. 1-2: d=2, m=3 contexts A, B, C, V=5, S_j=3.

    Embeddings are unit vectors at ``angles`` (degrees; default :data:`TOY2D_ANGLES`, three cones
    of different widths; ``ntp-toy2d`` checks that the data are NTP-separable). Probabilities on the supports
    :data:`TOY2D_SUPPORTS` are Dirichlet(1) draws ("assigned randomly"); the paper's realization
    had 𝓗 = 0.8811 nats, a seed gives another realization.
    """
    if len(angles) != 3 or not all(np.isfinite(a) for a in angles):
        raise InputError(f"angles: expected three finite angles in degrees, got {angles!r}")
    rng = make_rng(seed)
    angles = np.deg2rad(np.asarray(angles, dtype=float))
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


def _row_argmax_tokens(P: sp.csr_matrix) -> np.ndarray:
    """Per row of P (no empty rows), the column of its largest entry; ties go to the smallest
    column, as ``np.argmax`` would. Vectorised over rows: m can be in the hundreds of thousands."""
    starts = P.indptr[:-1]
    row_max = np.maximum.reduceat(P.data, starts)
    is_max = P.data == np.repeat(row_max, np.diff(P.indptr))
    # Position of the first maximum of each row (indices are sorted, so the smallest column).
    first = np.minimum.reduceat(np.where(is_max, np.arange(P.data.size), P.data.size), starts)
    return P.indices[first].astype(np.int64)


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


def _as_flat_sequences(tokens) -> tuple[np.ndarray, np.ndarray]:
    """Validate integer token sequences and return them concatenated, with their lengths."""
    if isinstance(tokens, (str, bytes)):
        raise InputError("tokens: expected a list of integer sequences, got a string")
    arrays = []
    for i, seq in enumerate(tokens):
        arr = np.asarray(seq)
        # dtype.kind rather than np.issubdtype: this loop runs once per sentence of a corpus.
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise InputError(f"tokens: sequence {i} must be a 1-D sequence of integers, got {arr.dtype} "
                             f"with shape {arr.shape}")
        arrays.append(arr)
    if not arrays:
        raise InputError("tokens: no sequences given")
    lengths = np.array([a.size for a in arrays], dtype=np.int64)
    flat = np.concatenate(arrays).astype(np.int64, copy=False) if lengths.sum() else np.zeros(0, np.int64)
    negative = np.flatnonzero(flat < 0)
    if negative.size:
        i = int(np.searchsorted(np.cumsum(lengths), negative[0], side="right"))
        raise InputError(f"tokens: sequence {i} has a negative token id {flat[negative[0]]}")
    return flat, lengths


def _pairs_per_sequence(lengths: np.ndarray, k: int, mode: str) -> np.ndarray:
    """The number of training pairs each sequence of ``lengths`` gives with context length ``k`` in ``mode``
    (see :func:`_training_pairs`): O(number of sequences), nothing of size k."""
    if mode == "autoregressive":
        return np.clip(np.minimum(k, lengths - 1), 0, None)  # pairs t = 1..min(k, len-1)
    if mode == "windows":
        return np.clip(lengths - k, 0, None)
    return (lengths >= k + 1).astype(np.int64)


def _training_pairs(flat: np.ndarray, lengths: np.ndarray, k: int, mode: str) -> tuple[np.ndarray, np.ndarray, int]:
    """All training pairs of the sequences ``flat`` split by ``lengths``, in reading order.

    Returns ``(contexts, next_tokens, n_skipped)``: contexts is an (n, k) int array (in the
    autoregressive mode a context of length t < k is padded with -1 on the right, which no
    token id can equal), next_tokens is (n,), n_skipped counts the sequences too short for
    any pair. ``mode`` is "last" (one pair per sequence), "windows" (every k+1 window) or
    "autoregressive" (prefixes of length 1..k).
    """
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    per_seq = _pairs_per_sequence(lengths, k, mode)
    n_skipped = int(np.count_nonzero(per_seq == 0))
    # Pair i comes from sequence seq[i]; its rank within that sequence is r[i] = 0, 1, ...
    seq = np.repeat(np.arange(lengths.size), per_seq)
    r = np.arange(seq.size) - np.repeat(np.cumsum(per_seq) - per_seq, per_seq)
    if mode == "autoregressive":
        t = r + 1  # the context is seq[:t], the next token seq[t]
        start = offsets[seq]
        cols = np.arange(k)
        gathered = flat[np.minimum(start[:, None] + cols, flat.size - 1)] if seq.size else np.zeros((0, k), np.int64)
        contexts = np.where(cols < t[:, None], gathered, -1)
        return contexts, flat[start + t], n_skipped
    if mode == "windows":
        _, _, contexts, next_tokens = window_pairs(flat, lengths, k)
        return contexts, next_tokens, n_skipped
    start = offsets[seq] + lengths[seq] - k - 1  # "last": the one window ending the sequence
    contexts = flat[start[:, None] + np.arange(k)]
    return contexts, flat[start + k], n_skipped


def window_pairs(flat: np.ndarray, lengths: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                         np.ndarray]:
    """Every window of k + 1 consecutive tokens of the sequences ``flat`` split by ``lengths``, in reading order: the
    one counting of windows behind :meth:`NTPData.from_sequences` (``windows=True``) and the probe's contexts
    (:func:`embgeo.ntp.analysis.probe.count_contexts`).

    Returns ``(seq, rank, contexts, next_tokens)``: pair i comes from sequence ``seq[i]``, at window start
    ``rank[i]`` within it; ``contexts`` (n, k) its first k tokens, ``next_tokens`` (n,) the last.
    """
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if lengths.size else np.zeros(0, np.int64)
    per_seq = np.clip(lengths - k, 0, None)
    seq = np.repeat(np.arange(lengths.size), per_seq)
    rank = np.arange(seq.size) - np.repeat(np.cumsum(per_seq) - per_seq, per_seq)
    start = offsets[seq] + rank
    return seq, rank, flat[start[:, None] + np.arange(k)], flat[start + k]


def first_seen_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Deduplicate the rows of an (n, k) int array (entries >= -1) in order of first appearance.

    Returns ``(first, ids)``: ``rows[first[j]]`` is the j-th distinct row, and ``ids[i]`` is
    the index j of row i. A row is packed into one int64 key when (max + 2)^k fits: a 1-D
    ``np.unique`` is ~10x faster than ``np.unique(axis=0)``, the fallback.
    """
    base = int(rows.max()) + 2
    if base ** rows.shape[1] < 2**62:
        keys = np.zeros(rows.shape[0], dtype=np.int64)
        for col in rows.T:
            keys = keys * base + (col + 1)
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    else:
        _, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # distinct rows by first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return first[order], rank[inverse.reshape(-1)]


def _context_tuples(rows: np.ndarray) -> list[tuple[int, ...]]:
    """The rows of a context array as tuples of ints, without the -1 padding."""
    if rows.size and rows.min() < 0:
        lengths = np.count_nonzero(rows >= 0, axis=1).tolist()
        return [tuple(row[:n]) for row, n in zip(rows.tolist(), lengths, strict=True)]
    return list(map(tuple, rows.tolist()))


def _context_label_strings(contexts: list[tuple[int, ...]], token_labels) -> list[str]:
    """Each context as its tokens' labels (or ids) joined by spaces."""
    names = [str(s) for s in token_labels] if token_labels is not None else None
    if names is None:
        return [" ".join(map(str, c)) for c in contexts]
    return [" ".join([names[t] for t in c]) for c in contexts]


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
        check_dense_size("random context embeddings", (m, D), "use a smaller D in 'random:D'")
        return make_rng(seed).standard_normal((m, D))
    raise InputError(f"embed: expected 'onehot', 'random:D' or a callable, got {embed!r}")


def _check_embedding_output(H, m: int) -> np.ndarray:
    H = as_float_array("embed(contexts)", H, ndim=2)
    if H.shape[0] != m:
        raise ShapeError(f"embed(contexts): expected {m} rows (one per distinct context), got shape {H.shape}")
    return H

