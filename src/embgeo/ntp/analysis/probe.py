"""The NTP geometry of a trained causal language model, measured on a text (issue 23).

Paper: ``ntp-implicit-bias-neurips.txt`` (Thrampoulidis, NeurIPS 2024). The paper fixes the context
embeddings h̄_j and asks where the decoder W goes under gradient descent; a trained language model has
both. On a text, its distinct contexts x̄_j with their empirical next-token distributions p̂_j and
weights π̂_j (Sec. 2), the model's final hidden states H (m, d) — the state at the last position of each
context, exactly what the LM head reads (after the final norm) — and the head's weight W (V, d) make an
:class:`~embgeo.ntp.data.NTPData` on which every object of the paper is computed: the entropy 𝓗, the
model's own CE(W) with CE − 𝓗 as a KL (eq. 2), compatibility and W*(H) (Def. 1, eq. 4), separability
(Def. 2, eq. 6) and W^mm(H) (Def. 3), and where the trained W sits relative to them:
cos(W − W*, W^mm), ‖P_F(W) − W*‖/‖W*‖ (Thm. 2's two components), the normalized NTP-margin of P_⊥(W),
the logits' structure and the rows' norms against token frequency.

* :func:`count_contexts`: the distinct contexts of token sequences (windows of k tokens, or every
  prefix up to the model's window) and their next-token counts;
* :func:`hidden_states`: H from any causal model given as a callable ``hidden(tokens) -> states``, so
  any PyTorch model (or any framework behind a torch-facing callable) can be probed;
* :func:`probe`: the whole measurement from ``(hidden, W, sequences)``, a :class:`ProbeResult`;
* :func:`load_causal_lm`, :func:`hf_hidden`, :func:`probe_model`: a Hugging Face checkpoint folder or a GGUF
  file (``transformers``, with ``gguf`` and ``accelerate`` for GGUF: the ``lm`` extra), read from disk only,
  never downloaded;
* :func:`read_units`: a text as lines, paragraphs or one stream; :func:`select_contexts`: which contexts a
  ``max_contexts`` keeps (a seeded random sample, the most frequent, or the first).

Conventions: H is (m, d), one context per row; W is (V, d); token ids are 0-based; theory in float64.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from embgeo.core.deadline import time_left
from embgeo.core.device import device_label, resolve_device
from embgeo.core.validate import (
    DENSE_BUDGET_BYTES,
    as_float_array,
    available_memory_bytes,
    check_dense_size,
    check_float,
    check_positive_int,
)
from embgeo.errors import InputError, MissingDependencyError, ShapeError, SolverError, TooLargeError
from embgeo.ntp import theory
from embgeo.ntp.data import NTPData, first_seen_rows
from embgeo.ntp.measure.geometry import effective_rank_of, numerical_rank_of
from embgeo.ntp.measure.metrics import (
    ReducedProblem,
    constrained_alignment,
    cosine,
    equal_rows_bound,
    reduced_reference,
    token_split,
)
from embgeo.ntp.solvers.constraints import row_dots
from embgeo.text.reading import read_text_lines

#: The ``hidden`` callable's contract: token ids (B, L) → final hidden states (B, L, d) of every position.
HiddenFn = Callable[[torch.Tensor], torch.Tensor]

#: Largest side of the Gram matrix (m × m or V × V) whose eigenvalues give the singular values of the
#: logits' off-support part R (:func:`logit_structure_factored`); above it those ranks are not computed.
GRAM_MAX = 5000

#: Rows of the logits H Wᵀ formed at once in the block passes (bounds the (rows, V) temporaries).
_BLOCK_BYTES = 64 * 1024**2

DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16}

#: How ``max_contexts`` picks its contexts (:func:`select_contexts`).
SAMPLES = ("random", "frequent", "first")

#: How a text becomes sequences (:func:`read_units`).
UNITS = ("paragraphs", "lines", "stream")

#: The default time limit of a whole probe, in seconds — the forward passes and the solvers together.
DEFAULT_MAX_SECONDS = 600.0

#: The time estimate's full passes over the m × V logits (each one GEMM of H with Wᵀ in row blocks): the loss's KL
#: (plus its log-sum-exp), the alignment's NTP-margin and the logits' structure's context margins (issue 38: at
#: m = 10,000, V = 49,152, d = 576 they were 28 s, 12 s and 11.6 s of the direct stages' 58 s).
LOGIT_PASSES = 3

#: Files of which a saved tokenizer has at least one (fast tokenizers, BPE, WordPiece, SentencePiece).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "vocab.txt", "tokenizer.model",
                   "spiece.model")


# -- contexts and their next-token counts (Sec. 2) ------------------------------------------------

@dataclass
class ProbeContexts:
    """The m distinct contexts of some token sequences and their next-token counts.

    Context j is ``sequences[line[j]][start[j]:end[j]]`` (the first place it appears) and is followed by
    token z ``counts[j, z]`` times in the whole text. ``mode`` is "windows" (k consecutive tokens) or
    "prefixes" (every prefix of a sequence, up to ``window`` tokens).
    """

    sequences: list[np.ndarray]
    line: np.ndarray
    start: np.ndarray
    end: np.ndarray
    counts: sp.csr_matrix
    mode: str
    context_length: int | None
    window: int | None
    info: dict

    @property
    def m(self) -> int:
        return self.counts.shape[0]

    @property
    def V(self) -> int:
        return self.counts.shape[1]

    def tokens(self, j: int) -> np.ndarray:
        """The token ids of context j, (length,) int64."""
        return self.sequences[self.line[j]][self.start[j]:self.end[j]]

    def probs_and_weights(self) -> tuple[sp.csr_matrix, np.ndarray]:
        """p̂ (m, V) sparse, rows summing to 1, and π̂ (m,): n_{j,z}/n_j and n_j/n (Sec. 2)."""
        n_j = np.asarray(self.counts.sum(axis=1)).ravel()
        return sp.csr_matrix(sp.diags(1.0 / n_j) @ self.counts), n_j / n_j.sum()


def count_contexts(sequences: Sequence[Sequence[int]], V: int, *, context_length: int | None = None,
                   prefixes: bool = False, window: int | None = None, max_contexts: int | None = None,
                   sample: str = "first", seed: int = 0) -> ProbeContexts:
    """Distinct contexts and next-token counts of token sequences (one per line of a text).

    Exactly one of ``context_length=k`` (every window of k + 1 consecutive tokens of a sequence gives a
    pair: its first k tokens, then the next) and ``prefixes=True`` (every prefix x_{<t} of a sequence,
    t = 1..min(len − 1, ``window``), gives the pair (x_{<t}, x_t): the contexts a causal LM conditions on
    within its window). Contexts are numbered in order of first appearance; ``max_contexts=N`` keeps N of
    them, chosen by ``sample`` (:func:`select_contexts`: "first", the default here; "random" with ``seed``;
    "frequent"), still numbered in order of first appearance (their counts still come from the whole text; the
    pairs of the others are dropped and counted in ``info``). Token ids must lie in [0, V).

    Cost: O(n k) numpy work for the windows, one pass of a dict over the tokens for the prefixes.
    """
    V = check_positive_int("V", V, 2)
    if (context_length is None) == (not prefixes):
        raise InputError("context_length, prefixes: give one — context_length=k (windows of k tokens) or "
                         "prefixes=True (every prefix up to the model's window)")
    if max_contexts is not None:
        max_contexts = check_positive_int("max_contexts", max_contexts)
    if sample not in SAMPLES:
        raise InputError(f"sample: expected one of {', '.join(SAMPLES)}, got {sample!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"seed: expected an integer >= 0, got {seed!r}")
    if window is not None:
        window = check_positive_int("window", window)
    seqs = _check_sequences(sequences, V)
    if prefixes:
        if window is None:
            raise InputError("window: prefixes need the model's window (its longest context), got None")
        line, start, end, ctx_id, nxt, info = _prefix_pairs(seqs, window)
        mode, k = "prefixes", None
    else:
        k = check_positive_int("context_length", context_length)
        if window is not None and k > window:
            raise InputError(f"context_length: {k} tokens exceed the model's window of {window} positions")
        line, start, end, ctx_id, nxt, info = _window_pairs(seqs, k)
        mode = "windows"
    kept = select_contexts(np.bincount(ctx_id, minlength=line.size), max_contexts, sample, seed)
    line, start, end, ctx_id, nxt, info = _keep(line, start, end, ctx_id, nxt, kept, info)
    info.update(sample=sample if max_contexts is not None else None, seed=int(seed))
    if nxt.size == 0:
        need = "2 tokens" if prefixes else f"{k + 1} tokens (context_length + 1)"
        raise InputError(f"sequences: no (context, next token) pair: all {len(seqs)} sequence(s) have fewer than "
                         f"{need} (longest: {max((len(s) for s in seqs), default=0)})")
    m = line.size
    counts = sp.csr_matrix((np.ones(nxt.size), (ctx_id, nxt)), shape=(m, V))
    counts.sum_duplicates()
    info = {**info, "sequences": len(seqs), "pairs": int(nxt.size), "contexts": m}
    return ProbeContexts(seqs, line, start, end, counts, mode, k, window, info)


def _check_sequences(sequences, V: int) -> list[np.ndarray]:
    if isinstance(sequences, (str, bytes)):
        raise InputError("sequences: expected a list of token-id sequences, got a string")
    out = []
    for i, seq in enumerate(sequences):
        arr = np.asarray(seq)
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise InputError(f"sequences: sequence {i} must be a 1-D sequence of integer token ids, got dtype "
                             f"{arr.dtype} with shape {arr.shape}")
        arr = arr.astype(np.int64)
        if arr.size and (arr.min() < 0 or arr.max() >= V):
            bad = int(arr.min()) if arr.min() < 0 else int(arr.max())
            raise InputError(f"sequences: sequence {i} has token id {bad}, outside the vocabulary [0, {V}) of the "
                             "head W (a tokenizer that does not belong to this model?)")
        out.append(arr)
    if not out:
        raise InputError("sequences: no sequences given (empty text?)")
    return out


def _window_pairs(seqs: list[np.ndarray], k: int):
    """(line, start, end) of every distinct context (m_all,), its id per pair and the next token per pair, info,
    for windows of k tokens."""
    lengths = np.array([s.size for s in seqs], dtype=np.int64)
    flat = np.concatenate(seqs) if lengths.sum() else np.zeros(0, np.int64)
    per_seq = np.clip(lengths - k, 0, None)
    seq = np.repeat(np.arange(lengths.size), per_seq)
    r = np.arange(seq.size) - np.repeat(np.cumsum(per_seq) - per_seq, per_seq)  # window start within its line
    info = {"skipped_sequences": int(np.count_nonzero(per_seq == 0)), "truncated_sequences": 0}
    if seq.size == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty, empty, empty, info
    pos = (np.concatenate([[0], np.cumsum(lengths)[:-1]])[seq] + r)
    windows = flat[pos[:, None] + np.arange(k)]
    first, ids = first_seen_rows(windows)  # first[j]: the pair where context j first appears
    start = r[first]
    return seq[first], start, start + k, ids, flat[pos + k], info


def _prefix_pairs(seqs: list[np.ndarray], window: int):
    """(line, start, end) of every distinct context (m_all,), its id per pair and the next token per pair, info,
    for every prefix up to ``window`` tokens.

    A prefix is identified by (id of the prefix one token shorter, its last token), so equal prefixes of
    different lines are one context, found in one pass over the tokens.
    """
    ids: dict[tuple[int, int], int] = {}
    line, end, pair_ctx, pair_next = [], [], [], []
    for i, s in enumerate(seqs):
        parent = -1
        toks = s.tolist()
        for t in range(1, min(len(toks) - 1, window) + 1):
            key = (parent, toks[t - 1])
            j = ids.get(key)
            if j is None:
                j = ids[key] = len(ids)
                line.append(i)
                end.append(t)
            pair_ctx.append(j)
            pair_next.append(toks[t])
            parent = j
    lengths = np.array([s.size for s in seqs])
    info = {"skipped_sequences": int(np.count_nonzero(lengths < 2)),
            "truncated_sequences": int(np.count_nonzero(lengths > window + 1))}
    line, end = np.array(line, dtype=np.int64), np.array(end, dtype=np.int64)
    return (line, np.zeros(line.size, dtype=np.int64), end, np.array(pair_ctx, dtype=np.int64),
            np.array(pair_next, dtype=np.int64), info)


def select_contexts(pairs_per_context: np.ndarray, max_contexts: int | None, sample: str = "random",
                    seed: int = 0) -> np.ndarray:
    """The ids of the contexts ``max_contexts`` keeps, ascending (= in order of first appearance).

    ``pairs_per_context`` (m,): n_j, how often context j occurs (ids in order of first appearance).
    "random": a uniform sample without replacement of min(N, m) distinct contexts, from
    ``numpy.random.default_rng(seed)`` (the same seed, the same contexts); "frequent": the N largest n_j, ties
    broken by first appearance; "first": the first N. All m when ``max_contexts`` is None or ≥ m.
    Returns (min(N, m),) int64.
    """
    n_j = np.asarray(pairs_per_context)
    m = n_j.size
    if max_contexts is None or max_contexts >= m:
        return np.arange(m, dtype=np.int64)
    if sample == "first":
        return np.arange(max_contexts, dtype=np.int64)
    if sample == "frequent":
        return np.sort(np.argsort(-n_j, kind="stable")[:max_contexts]).astype(np.int64)
    if sample == "random":
        return np.sort(np.random.default_rng(seed).choice(m, size=max_contexts, replace=False)).astype(np.int64)
    raise InputError(f"sample: expected one of {', '.join(SAMPLES)}, got {sample!r}")


def _keep(line, start, end, ctx, nxt, kept: np.ndarray, info: dict):
    """The kept contexts renumbered 0..len(kept) − 1 (in the order of ``kept``) and their pairs; the rest counted
    in ``info`` (``contexts_dropped``, ``pairs_dropped``)."""
    new = np.full(line.size, -1, dtype=np.int64)
    new[kept] = np.arange(kept.size)
    mask = new[ctx] >= 0
    info = {**info, "pairs_dropped": int((~mask).sum()), "contexts_dropped": int(line.size - kept.size)}
    return line[kept], start[kept], end[kept], new[ctx[mask]], nxt[mask], info


# -- the model's final hidden states -----------------------------------------------------------------

def hidden_states(hidden: HiddenFn, contexts: ProbeContexts, *, d: int | None = None, batch_size: int = 32,
                  device: str | torch.device = "cpu", progress: bool = True,
                  on_batch: Callable[[int, int], object] | None = None, deadline: float | None = None) -> np.ndarray:
    """H (m, d) float64: the final hidden state at the last position of every context.

    ``hidden(tokens)`` takes a torch.long tensor (B, L) of token ids on ``device`` and returns the final
    hidden states (B, L, d) of every position — what the LM head reads (after the final norm) — of a
    causal model in eval mode; it is called under ``torch.no_grad()``.

    * windows: the contexts (all of length k) in batches of ``batch_size``; h_j is the state at position k.
    * prefixes: one pass per sequence holding a context's first appearance, padded on the right with
      token 0 to the longest in its batch; the prefix x_{<t} has the state at position t. This uses that
      the model is causal (position t − 1 reads only tokens < t), which is checked on the first batch:
      the first position is run again alone and must agree, else :class:`InputError`.

    ``d``: the expected width (W's), checked. A tqdm bar counts contexts; Ctrl-C raises KeyboardInterrupt.
    Whatever the model's dtype, H is returned in float64. ``on_batch(done, total)`` is called after each forward
    pass (batches done, batches in all); past ``deadline`` (a ``time.perf_counter()`` value) the next batch is
    not started: :class:`~embgeo.errors.TooLargeError` saying how far it got.
    """
    from tqdm.auto import tqdm

    if not callable(hidden):
        raise InputError(f"hidden: expected a callable hidden(tokens (B, L)) -> states (B, L, d), got "
                         f"{type(hidden).__name__}")
    batch_size = check_positive_int("batch_size", batch_size)
    dev = resolve_device(device)
    m = contexts.m
    H: np.ndarray | None = None
    total = batch_plan(contexts, batch_size)["batches"]
    t0 = time.perf_counter()
    with torch.no_grad(), tqdm(total=m, desc="forward", unit="context", disable=None if progress else True,
                               leave=False) as bar:
        for done, (rows, batch, where, positions) in enumerate(_batches(contexts, batch_size)):
            if deadline is not None and time.perf_counter() > deadline:
                raise TooLargeError(f"the forward passes ran out of the time limit after {done} of {total} batches "
                                    f"({time.perf_counter() - t0:.0f} s): allow more time (max_seconds, --max-seconds) "
                                    "or use fewer contexts (max_contexts, --max-contexts)")
            tokens = torch.as_tensor(batch, dtype=torch.long, device=dev)
            states = _call(hidden, tokens, d)
            if H is None:
                H = np.empty((m, states.shape[2]))
                if contexts.mode == "prefixes" and tokens.shape[1] > 1:
                    _check_causal(hidden, tokens[:1, :1], states[0, 0], d)
            at = states.device
            picked = states[torch.as_tensor(where, device=at), torch.as_tensor(positions, device=at)]
            H[rows] = picked.to("cpu", torch.float64).numpy()
            bar.update(len(rows))
            if on_batch is not None:
                on_batch(done + 1, total)
    return as_float_array("hidden(tokens)", H, ndim=2)


def batch_plan(contexts: ProbeContexts, batch_size: int) -> dict:
    """The forward passes :func:`hidden_states` will run, without running them: ``batches``, ``tokens`` (token
    positions in all, padding included), ``longest`` (the longest sequence L) and ``largest`` (the most
    positions B × L in one batch)."""
    if contexts.mode == "windows":
        k, m = contexts.context_length, contexts.m
        sizes = np.minimum(batch_size, m - np.arange(0, m, batch_size))
        return {"batches": int(sizes.size), "tokens": int(m * k), "longest": int(k),
                "largest": int(sizes.max(initial=0) * k)}
    lines, inverse = np.unique(contexts.line, return_inverse=True)
    need = np.zeros(lines.size, dtype=np.int64)
    np.maximum.at(need, inverse, contexts.end)
    need = np.sort(need)[::-1]  # the order of _batches: longest first, each batch padded to its first
    heads = need[::batch_size]
    sizes = np.minimum(batch_size, need.size - np.arange(0, need.size, batch_size))
    return {"batches": int(heads.size), "tokens": int(np.sum(heads * sizes)), "longest": int(need.max(initial=0)),
            "largest": int(np.max(heads * sizes, initial=0))}


def _batches(contexts: ProbeContexts, batch_size: int):
    """Per forward pass: (context rows, token ids (B, L), the batch row and the position of each context's state)."""
    if contexts.mode == "windows":
        for s in range(0, contexts.m, batch_size):
            rows = np.arange(s, min(s + batch_size, contexts.m))
            yield (rows, np.stack([contexts.tokens(j) for j in rows]), np.arange(rows.size),
                   np.full(rows.size, contexts.context_length - 1))
        return
    # prefixes: each line where some context first appears, as far as its longest such context; longest first
    lines, inverse = np.unique(contexts.line, return_inverse=True)
    need = np.zeros(lines.size, dtype=np.int64)
    np.maximum.at(need, inverse, contexts.end)
    order = np.argsort(-need, kind="stable")
    members = np.argsort(inverse, kind="stable")  # contexts grouped by line
    bounds = np.concatenate([[0], np.cumsum(np.bincount(inverse, minlength=lines.size))])
    for s in range(0, lines.size, batch_size):
        chunk = order[s:s + batch_size]
        L = int(need[chunk].max())
        batch = np.zeros((chunk.size, L), dtype=np.int64)  # right padding: a causal model never reads it
        rows, where = [], []
        for b, u in enumerate(chunk):
            batch[b, :need[u]] = contexts.sequences[lines[u]][:need[u]]
            rows.append(members[bounds[u]:bounds[u + 1]])
            where.append(np.full(bounds[u + 1] - bounds[u], b))
        rows = np.concatenate(rows)
        yield rows, batch, np.concatenate(where), contexts.end[rows] - 1


def _call(hidden: HiddenFn, tokens: torch.Tensor, d: int | None) -> torch.Tensor:
    """hidden(tokens) checked: a floating tensor (B, L, d)."""
    out = hidden(tokens)
    B, L = tokens.shape
    if not isinstance(out, torch.Tensor) or not out.is_floating_point() or out.ndim != 3 or tuple(out.shape[:2]) \
            != (B, L) or (d is not None and out.shape[2] != d):
        got = (f"a {out.dtype} tensor of shape {tuple(out.shape)}" if isinstance(out, torch.Tensor)
               else type(out).__name__)
        want = f"(B, L, d) = ({B}, {L}, {d if d is not None else 'd'})"
        raise ShapeError(f"hidden(tokens): expected the final hidden states of every position, a floating tensor "
                         f"{want}, got {got}")
    return out.detach()


def _check_causal(hidden: HiddenFn, first: torch.Tensor, in_batch: torch.Tensor, d: int | None) -> None:
    """The state of the first position, run alone, equals its state inside the longer padded sequence."""
    alone = _call(hidden, first, d)[0, 0]
    eps = max(torch.finfo(alone.dtype).eps, torch.finfo(in_batch.dtype).eps)  # the model's dtype, before the cast
    alone, in_batch = alone.to(torch.float64), in_batch.to(torch.float64)
    tol = min(max(1e4 * eps, 1e-8), 0.1)  # rounding of other batch shapes; a bidirectional model differs by O(1)
    gap = float(torch.linalg.vector_norm(alone - in_batch) / max(float(torch.linalg.vector_norm(alone)), 1e-300))
    if not gap <= tol:
        raise InputError(f"hidden: the model is not causal: the first position's state changes by {gap:.2e} "
                         f"(relative; tolerance {tol:.0e}) when later tokens follow it, so the state at position t "
                         "is not that of the prefix x_<t; probe with context_length=k (windows) instead")


# -- the measurement -------------------------------------------------------------------------------

@dataclass
class ProbeResult:
    """Everything :func:`probe` / :func:`measure` found for one model on one text.

    Attributes
    ----------
    data : NTPData or None
        H (m, d) as ``data.embeddings``, p̂ and π̂ (None until the forward passes are done).
    W : (V, d) float64, the head's weight (with the bias as a last column when it was appended).
    contexts : ProbeContexts or None
    meta : dict — the model, device, dtype, mode, window, options.
    memory : dict — bytes estimated before the forward passes (:func:`memory_estimate`).
    estimate : dict — seconds estimated before the forward passes (:func:`time_estimate`).
    entropy, ce, kl_gap : float — 𝓗, CE(W) (eq. 2) and CE − 𝓗 computed as a KL (nats).
    compatibility : theory.Compatibility or None — Def. 1, with W*(H) when compatible.
    dim_F : int or None
    separability : theory.Separability or None — Def. 2, the model's W tried first as the certificate.
    svm : theory.NTPSVM or None — Def. 3, warm-started from the model's W.
    alignment : dict — :func:`_alignment`: on the constrained rows (``rows_cos_mm``, ``rows_cos_corrected`` with
        their certified bands ``_lo``/``_hi``, ``star_cos``, ``subspace_error``), the never-next block apart
        (``unseen_share``, ...), the old all-rows ``cos_mm``/``cos_corrected`` beside their bounds
        ``cos_mm_bound``/``cos_corrected_bound``, ``margin`` the normalized NTP-margin of P_⊥(W),
        ``svm_error_bound`` ε, norms. NaN where an object does not exist (``errors`` or the compatibility /
        separability results say why).
    head_training : dict — :func:`train_head`'s runs (empty unless it ran).
    logits : dict — :func:`logit_structure_factored`'s scalars.
    arrays : dict — per-context and per-token arrays (singular values of the logits, in-support centred
        logits and log p̂, per-context margins, row norms of W, token frequencies).
    frequency : dict — row norms of W against the tokens' next-token frequency.
    errors : dict — stage → why it was not decided (time limit, memory budget).
    seconds : dict — time per stage.
    token_labels : list of str or None — the name of each row of W.
    """

    data: NTPData | None
    W: np.ndarray
    contexts: ProbeContexts | None = None
    meta: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    entropy: float = math.nan
    ce: float = math.nan
    kl_gap: float = math.nan
    compatibility: theory.Compatibility | None = None
    dim_F: int | None = None
    separability: theory.Separability | None = None
    svm: theory.NTPSVM | None = None
    alignment: dict = field(default_factory=dict)
    logits: dict = field(default_factory=dict)
    arrays: dict = field(default_factory=dict)
    frequency: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)
    token_labels: list[str] | None = None
    estimate: dict = field(default_factory=dict)
    head_training: dict = field(default_factory=dict)

    @property
    def w_star(self) -> np.ndarray | None:
        """W*(H) (V, d), when the data are compatible."""
        return self.compatibility.W if self.compatibility else None

    @property
    def w_mm(self) -> np.ndarray | None:
        """W^mm(H) (V, d) (the best certified point; see ``svm.residuals['error_bound']``), when separable."""
        return None if self.svm is None else self.svm.W

    @property
    def separable(self) -> bool | None:
        """The one separability verdict (Def. 2) that is printed and written: True, False, or None (undecided).

        Decided by :func:`~embgeo.ntp.theory.is_separable` or, when that stopped undecided, by the NTP-SVM (a
        feasible point certifies separability, a Farkas matrix the opposite)."""
        return None if self.separability is None else bool(self.separability)

    @property
    def separability_verdict(self) -> str:
        """"True", "False" or "undecided": :attr:`separable` as a word (the CLI prints it, summary.json has it)."""
        return "undecided" if self.separable is None else str(self.separable)

    def summary(self) -> dict:
        """A JSON-ready dict of every scalar (NaN as None)."""
        comp, sep, svm = self.compatibility, self.separability, self.svm
        data = self.data
        out = {
            "meta": self.meta,
            "input": None if self.contexts is None else self.contexts.info,
            "m": None if data is None else data.m, "V": int(self.W.shape[0]), "d": int(self.W.shape[1]),
            "memory_estimate_bytes": self.memory, "time_estimate_seconds": self.estimate,
            "entropy_nats": self.entropy, "ce_nats": self.ce, "kl_gap_nats": self.kl_gap,
            "compatible": None if comp is None else bool(comp),
            "compatibility_residual": None if comp is None else comp.residual,
            "compatibility_method": None if comp is None else comp.method,
            "compatibility_certificate_norm": None if comp is None else comp.certificate_norm,
            "w_star_norm": None if not comp else float(np.linalg.norm(comp.W)),
            "dim_F": self.dim_F,
            "separable": self.separable, "separability_verdict": self.separability_verdict,
            "separability_method": None if sep is None else sep.method,
            "separability_residuals": None if sep is None else sep.residuals,
            "svm_status": None if svm is None else svm.status,
            "ntp_margin_of_w_mm": None if svm is None or svm.W is None else svm.margin,
            "svm_residuals": None if svm is None or svm.W is None else svm.residuals,
            "alignment": self.alignment, "logits": self.logits, "frequency": self.frequency,
            "errors": self.errors, "seconds": self.seconds, "head_training": self.head_training,
        }
        return _jsonable(out)

    def save(self, out: str | PathLike, *, save_arrays: bool = False) -> list[str]:
        """Write summary.json, vocabulary.txt, the figure (PNG + PDF), the small arrays and, with ``save_arrays``,
        the dense matrices to ``out``.

        Always: ``summary.json``; ``vocabulary.txt`` (line z names row z of W); ``probe.png``/``probe.pdf``;
        ``weights.npy`` π̂ (m,); the per-context and per-token vectors of ``self.arrays``; with a probe,
        ``next_token_counts.npz`` (sparse (m, V) counts n_{j,z}) and ``contexts.npz`` (``tokens`` concatenated,
        ``offsets`` (m + 1,)). Only with ``save_arrays=True`` (``--save-arrays``): the dense matrices ``H.npy``
        (m, d), ``W.npy`` (V, d) and ``W_star.npy``, ``W_mm.npy`` (V, d) where they exist — at V = 49,152,
        d = 576 each V × d one is 226 MB. Returns the names written.
        """
        import json

        import matplotlib.pyplot as plt

        from embgeo.ntp.measure.figures import probe_figure

        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        written = []

        def npy(name: str, arr) -> None:
            np.save(out / f"{name}.npy", arr)
            written.append(f"{name}.npy")

        if self.data is not None:
            npy("weights", self.data.weights)
        if save_arrays:
            if self.data is not None:
                npy("H", self.data.embeddings)
            npy("W", self.W)
            if self.w_star is not None:
                npy("W_star", self.w_star)
            if self.w_mm is not None:
                npy("W_mm", self.w_mm)
        for name, arr in self.arrays.items():
            npy(name, arr)
        if self.contexts is not None:
            ctx = self.contexts
            sp.save_npz(out / "next_token_counts.npz", ctx.counts)
            tokens = [ctx.tokens(j) for j in range(ctx.m)]
            np.savez(out / "contexts.npz", tokens=np.concatenate(tokens),
                     offsets=np.concatenate([[0], np.cumsum([t.size for t in tokens])]))
            written += ["next_token_counts.npz", "contexts.npz"]
        if self.token_labels is not None:
            (out / "vocabulary.txt").write_text("".join(f"{w}\n" for w in self.token_labels), encoding="utf-8")
            written.append("vocabulary.txt")
        if self.data is not None:
            fig = probe_figure(self)
            for ext in ("png", "pdf"):
                fig.savefig(out / f"probe.{ext}", dpi=120, bbox_inches="tight")
            plt.close(fig)
            written += ["probe.png", "probe.pdf"]
        (out / "summary.json").write_text(json.dumps(self.summary(), indent=2) + "\n")
        return ["summary.json", *written]


def _jsonable(value):
    """NaN/inf → None, numpy scalars → Python, recursively (summary.json is strict JSON)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def memory_estimate(probs: sp.csr_matrix, d: int, model: dict | None = None, plan: dict | None = None) -> dict:
    """Bytes the probe needs at most, by part, before any forward pass (probs (m, V) sparse, width d).

    The theory's parts (:func:`embgeo.ntp.theory.estimate_memory`: coordinates, the equality system of W*,
    the SVM's dual, the V × d answers) plus ``hidden_states`` H (m × d), ``head`` W (V × d), ``logit_blocks``
    (the row blocks of H Wᵀ in the loss and margin passes) and ``rest_gram`` (the m × m or V × V Gram of the
    logits' off-support part, when its side is at most GRAM_MAX). With ``model`` (:func:`model_info`) and
    ``plan`` (:func:`batch_plan`): ``model``, its parameters in their dtype (already in memory when the model is
    loaded), and ``forward_activations``, one batch's forward pass: B·L positions × (6 d + 2 d_ff) values (the
    residual stream, q, k, v, attention output, the MLP's two d_ff-wide temporaries of one layer: no gradients
    are kept, so layers do not add up) plus the attention scores B × heads × L × L. ``total`` sums them all.
    """
    m, V = probs.shape
    mem = dict(theory.estimate_memory(NTPData(np.zeros((m, d)), probs)))
    mem.pop("total")
    side = min(m, V)
    mem.update(hidden_states=8 * m * d, head=8 * V * d, logit_blocks=6 * _BLOCK_BYTES,
               rest_gram=3 * 8 * side * side if side <= GRAM_MAX else 0)
    if model is not None and plan is not None:
        b, width, ff = model["dtype_bytes"], model["hidden_size"], model["intermediate_size"]
        mem["model"] = int(model["parameter_bytes"])
        mem["forward_activations"] = int(b * plan["largest"] * (6 * width + 2 * ff + model["heads"] * plan["longest"]))
    mem["total"] = int(sum(mem.values()))
    return mem


def _seconds_per_call(fn: Callable[[], object], min_seconds: float) -> float:
    """Mean seconds of ``fn()`` over repeats for at least ``min_seconds``, after one warm-up call."""
    fn()
    calls, t0 = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= min_seconds:
            return elapsed / calls


def forward_rate(hidden: HiddenFn, contexts: ProbeContexts, batch_size: int, device: torch.device,
                 d: int | None) -> float:
    """Seconds per token position of ``hidden`` on this machine: its first batch (:func:`_batches`; the longest when
    the passes are padded prefixes, so per position an upper bound) timed once after a warm-up call. Measured
    rather than counted: 2 × parameters × positions at a nominal rate was 2–4× off (issue 38: attention, the norms
    and small batches of k = 2 positions are not in the parameter count)."""
    _, batch, _, _ = next(_batches(contexts, batch_size))
    tokens = torch.as_tensor(batch, dtype=torch.long, device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    with torch.no_grad():
        _call(hidden, tokens, d)
        sync()
        t0 = time.perf_counter()
        _call(hidden, tokens, d)
        sync()
    return (time.perf_counter() - t0) / tokens.numel()


def pass_rates(probs: sp.csr_matrix, weights: np.ndarray, W: np.ndarray, sample: int = 64,
               min_seconds: float = 0.05) -> dict:
    """Seconds per context of the probe's two kinds of pass over the logits, timed on this machine with the code
    that runs them: ``loss`` — :func:`_blockwise_kl`; ``margins`` — :func:`_context_margins` (the alignment's
    NTP-margin is the same kernel on P_⊥(W)); both on the first ``sample`` contexts' supports and the real W (V, d)
    with random embeddings (H is not known before the forward passes; the cost does not depend on its values); and
    ``fixed`` — :func:`_fixed_seconds`, the seconds of the structure pass that do not grow with m."""
    k = min(sample, probs.shape[0])
    rows = probs[:k]
    w = np.asarray(weights[:k], dtype=np.float64)
    H = np.random.default_rng(0).standard_normal((k, W.shape[1]))
    part = NTPData(H, rows, w / w.sum())
    loss = _seconds_per_call(lambda: _blockwise_kl(part, W), min_seconds) / k
    margins = _seconds_per_call(lambda: _context_margins(H, W, part), min_seconds) / k
    return {"loss": loss, "margins": margins, "fixed": _fixed_seconds(W, min_seconds)}


#: Rows of W on which the structure pass's fixed work is timed (:func:`_fixed_seconds`).
FIXED_SAMPLE_ROWS = 4096


def _fixed_seconds(W: np.ndarray, min_seconds: float) -> float:
    """Seconds of the work after the solvers that does not grow with m: the structure pass's QR factor of W and
    WᵀW (:func:`logit_structure_factored`), O(V d²) each — timed on FIXED_SAMPLE_ROWS rows of W and scaled to V
    (both are linear in the rows). Issue 38: on a GPT-2-sized head (V = 50,257, d = 768) they were ~3 s that the
    per-context rates left out. SciPy's statistics module (the structure pass's Spearman) is imported here too,
    so that its one-off second falls before the solvers."""
    import scipy.stats  # noqa: F401

    n = min(FIXED_SAMPLE_ROWS, W.shape[0])
    part = W[:n]
    per_call = _seconds_per_call(lambda: (np.linalg.qr(part, mode="r"), part.T @ part), min_seconds)
    return per_call * W.shape[0] / n


def time_estimate(plan: dict, m: int, max_seconds: float | None, rates: dict) -> dict:
    """Seconds the probe may take, estimated before the forward passes from the rates timed here
    (``rates["forward"]``: seconds per token position, :func:`forward_rate`; ``rates["loss"]``, ``rates["margins"]``:
    seconds per context, :func:`pass_rates`).

    ``forward``: the token positions of the forward passes (:func:`batch_plan`; padding included) at their rate;
    ``logit_passes``: the LOGIT_PASSES passes over the m × V logits — the loss's and two of the margins' (the
    alignment's NTP-margin, the logits' structure) — and the structure's fixed O(V d²) work (``rates["fixed"]``,
    :func:`_fixed_seconds`); ``after_solvers``: the part of them that runs after the exact equality solve (the
    margins' two and the fixed work: :func:`measure` keeps that time when it gives the exact solve its deadline, and
    times the passes again before the iterative solvers); ``solvers``: what ``max_seconds`` leaves after those
    (inf without a limit; 0 when nothing: then separability and the NTP-SVM will not run); ``total``: their sum;
    ``limit``: max_seconds. The exact equality solve (W*, dim F) is not in it; it begins no step past the solvers'
    deadline."""
    forward = plan["tokens"] * rates["forward"]
    after_solvers = m * (LOGIT_PASSES - 1) * rates["margins"] + rates["fixed"]
    passes = m * rates["loss"] + after_solvers
    limit = math.inf if max_seconds is None else float(max_seconds)
    solvers = max(limit - forward - passes, 0.0)
    return {"forward": forward, "logit_passes": passes, "after_solvers": after_solvers, "solvers": solvers,
            "total": forward + passes + solvers, "limit": limit, "rates": dict(rates), "tokens": plan["tokens"],
            "batches": plan["batches"]}


def check_memory(memory: dict, V: int, d: int) -> None:
    """Refuse, before any work, a V × d answer above the dense budget or an estimate above the memory left."""
    one_w = 8 * V * d
    if one_w > DENSE_BUDGET_BYTES:
        raise TooLargeError(f"W, W* and W^mm are V × d = {V} × {d} float64 matrices of {one_w / 1024**3:.2f} GiB each "
                            f"(budget {DENSE_BUDGET_BYTES / 1024**3:.2f} GiB)")
    room = available_memory_bytes()
    if memory["total"] - memory.get("model", 0) > room:  # the model is already loaded: not in `room`
        raise TooLargeError(f"the probe's exact paths need up to {memory['total'] / 1024**3:.2f} GiB but this process "
                            f"can allocate only {room / 1024**3:.2f} GiB more: use fewer contexts (max_contexts, "
                            "--max-contexts)")


def _stage(result: ProbeResult, report, name: str, t0: float, started=None, following: str | None = None) -> float:
    """Record the stage's time, tell ``report``, then ``started(following)``; returns the clock for the next stage."""
    now = time.perf_counter()
    result.seconds[name] = now - t0
    if report is not None:
        report(name, result)
    if started is not None and following is not None:
        started(following)
    return time.perf_counter()


def measure(data: NTPData, W, *, max_seconds: float | None = None,
            report: Callable[[str, ProbeResult], object] | None = None,
            solver_progress: Callable[[int, dict], object] | None = None,
            result: ProbeResult | None = None, separability_method: str = "auto",
            started: Callable[[str], object] | None = None, head_training: dict | None = None,
            after_solvers: float = 0.0) -> ProbeResult:
    """The NTP paper's objects for the embeddings H = ``data.embeddings`` (m, d) and the decoder W (V, d).

    In order (``started(stage)`` is called before each and ``report(stage, result)`` after it, for printing):
    ``"loss"``: 𝓗, CE(W) − 𝓗 as a KL (:func:`theory.kl_gap`, over row blocks of the logits) and CE(W) (eq. 2)
    as 𝓗 + KL;
    ``"compatibility"``: Def. 1 (W*(H) or the certificate that (4) has no solution) and dim F (eq. 5);
    ``"geometry"``: the logits' structure (:func:`logit_structure_factored`) and the rows' norms against token
    frequency — with P_F(W) and the normalized NTP-margin of P_⊥(W) (:func:`_alignment_prep`), which need no solver
    either, so that all of it is done, and timed, before the solvers start;
    ``"separability"``: Def. 2 — with ``separability_method="auto"`` W is tried first as the certificate
    (``candidate=W``: exact when P_⊥(W) has all margins > 0), then the cheap routes, the LP when small, else the
    dual for a quarter of the time (at most 60 s) and the squared hinge for the rest; ``"hinge"``, ``"dual"`` or
    ``"lp"`` is that route alone (:func:`theory.is_separable`; the LP at the memory of the whole constraint system);
    ``"svm"``: W^mm(H) (Def. 3) by the augmented Lagrangian warm-started from W, when separable or undecided —
    when separability was undecided, the NTP-SVM's outcome decides it (``result.separability``, the one verdict
    :attr:`ProbeResult.separable` printed and written);
    ``"alignment"``: W against W* and W^mm on the constrained rows, the never-next block apart, the old all-rows
    cosines beside their bounds, and the NTP-margin computed before (:func:`_alignment`); with
    ``head_training`` (a dict of :func:`train_head`'s keyword arguments), ``"train_head"``: a linear head trained
    from zero on H (:func:`train_head`).

    ``max_seconds`` bounds the whole measurement. The exact equality solve of the compatibility stage begins no step
    of its factorization past the limit less ``after_solvers`` (the caller's estimate of the passes after it); the
    iterative solvers (separability's, the NTP-SVM) together get what is left of the limit less the seconds that
    the alignment's passes with W^mm take — measured before they start, on W standing in for W^mm (the same row
    passes) — so that the whole ends within the limit. They call ``solver_progress(iteration, info)``
    (``info["gap"]``: the relative duality gap); a problem one of them cannot decide, or that the memory budget
    refuses, leaves its objects None and says why in ``result.errors`` (never an exception: the rest is measured).
    A stage the exact solve cannot finish in its time says so in ``result.errors``.
    """
    if not isinstance(data, NTPData):
        raise InputError(f"data: expected an embgeo.ntp.NTPData, got {type(data).__name__}")
    W = as_float_array("W", W, ndim=2)
    if W.shape != (data.V, data.d):
        raise ShapeError(f"W: expected shape (V, d) = ({data.V}, {data.d}) to match the data, got {W.shape}")
    if max_seconds is not None:  # 0 is allowed: the stages before spent the caller's limit, the solvers are not run
        max_seconds = check_float("max_seconds", max_seconds, positive=False)
    if separability_method not in theory.SEPARABILITY_METHODS:
        raise InputError(f"separability_method: expected one of {', '.join(theory.SEPARABILITY_METHODS)}, got "
                         f"{separability_method!r}")
    res = result if result is not None else ProbeResult(data, W)
    res.data, res.W = data, W
    if started is not None:
        started("loss")
    t = time.perf_counter()
    # the solvers stop early enough for the passes after them (``after_solvers`` seconds, estimated by the caller)
    deadline = None if max_seconds is None else t + max(max_seconds - after_solvers, 0.0)
    wall = None if max_seconds is None else t + max_seconds  # the whole measurement's

    res.entropy = theory.entropy(data)
    res.kl_gap = _blockwise_kl(data, W)
    res.ce = res.entropy + res.kl_gap  # a sum of two non-negative terms: exact to rounding, one pass fewer
    t = _stage(res, report, "loss", t, started, "compatibility")

    F = theory.subspace(data)
    F.deadline = deadline  # the exact solve behind W*, dim F and every projection begins no step past it
    try:
        res.compatibility = theory.is_compatible(data, F)
    except (SolverError, TooLargeError) as exc:
        res.errors["compatibility"] = str(exc)
    try:
        res.dim_F = F.dim
    except (SolverError, TooLargeError) as exc:
        res.errors["dim_F"] = str(exc)
    t = _stage(res, report, "compatibility", t, started, "geometry")

    # What needs no solver's output runs before the solvers — P_F(W), the NTP-margin of P_⊥(W) and the logits'
    # structure — and what the alignment does with W^mm is timed on W standing in for it: the solvers then get the
    # limit less measured seconds, not estimated ones (issue 38: the estimate had left out the m × m Gram and the row
    # passes, and the probe ended 18 % past its limit at m = 2000).
    F.deadline = wall  # unless the compatibility stage built it, the projection needs the solve
    prep = _alignment_prep(data, W, F, res)
    if prep.error is not None:
        res.errors["alignment"] = prep.error
    res.logits, arrays = logit_structure_factored(data.embeddings, W, data)
    res.frequency, freq_arrays = _frequency(data, W)
    res.arrays = {**arrays, **freq_arrays}
    if wall is not None:
        begun = time.perf_counter()
        _alignment(data, W, res.w_star, W, 0.0, prep)
        deadline = wall - (time.perf_counter() - begun)  # the solvers end in time for the alignment's passes
    F.deadline = deadline
    t = _stage(res, report, "geometry", t, started, "separability")

    full = bool(np.all(data.support_sizes == data.V))
    if full:
        res.errors["separability"] = "every support is the whole vocabulary: no separability constraints (6b)"
    else:
        try:
            how = {"candidate": W} if separability_method == "auto" else {"method": separability_method}
            res.separability = theory.is_separable(data, F, max_seconds=time_left(deadline), progress=solver_progress,
                                                   **how)
        except (SolverError, TooLargeError) as exc:
            res.errors["separability"] = str(exc)
    t = _stage(res, report, "separability", t, started, "svm")

    if not full and (res.separability is None or res.separability):
        try:
            # The ALM at every rank: it is the solver the warm start W reaches (the dual route ignores it), and on
            # a trained model's H (separable by W itself) it was 50-100x faster than the dual even with rank H = m.
            res.svm = theory.ntp_svm(data, subspace_=F, separability=res.separability, warm_start=W, method="alm",
                                     max_seconds=time_left(deadline), progress=solver_progress)
        except (SolverError, TooLargeError) as exc:
            res.errors["svm"] = str(exc)
        if res.separability is None and res.svm is not None:
            res.separability = res.svm.separability  # the NTP-SVM decided it: the one verdict from here on
    t = _stage(res, report, "svm", t, started, "alignment")

    eps = math.nan if res.svm is None or res.svm.W is None else float(res.svm.residuals.get("error_bound", math.nan))
    res.alignment = _alignment(data, W, res.w_star, res.w_mm, eps, prep)
    _stage(res, report, "alignment", t)
    if head_training is not None:
        train_head(res, **head_training, report=report, started=started)
    return res


def _blockwise_kl(data: NTPData, W: np.ndarray) -> float:
    """CE(W) − 𝓗 of eq. (2) as Σ_j π̂_j KL(p̂_j ‖ 𝕊(W h̄_j)) (:func:`theory.kl_gap`), over row blocks of contexts
    (never an m × V array)."""
    rows = max(1, _BLOCK_BYTES // (8 * data.V))
    kl = 0.0
    for s in range(0, data.m, rows):
        e = min(s + rows, data.m)
        w = data.weights[s:e]
        kl += float(w.sum()) * theory.kl_gap(NTPData(data.embeddings[s:e], data.probs[s:e], w / w.sum()), W)
    return kl


@dataclass
class AlignmentPrep:
    """The alignment's parts that need no solver: P_F(W) (V, d) when W* exists, the normalized NTP-margin of P_⊥(W),
    and the error that stopped either (SolverError / TooLargeError text)."""

    PFW: np.ndarray | None = None
    margin: float = math.nan
    error: str | None = None


def _alignment_prep(data: NTPData, W: np.ndarray, F: theory.Subspace, res: ProbeResult) -> AlignmentPrep:
    """P_F(W) (when W* exists) and the NTP-margin of P_⊥(W) (:func:`theory.ntp_margin`), before the solvers."""
    prep = AlignmentPrep()
    try:
        prep.PFW = None if res.w_star is None else F.project(W)
        if not np.all(data.support_sizes == data.V):
            prep.margin = theory.ntp_margin(data, W, F, perp=None if prep.PFW is None else W - prep.PFW)
    except (SolverError, TooLargeError) as exc:  # SolverError: the limit was reached before F's exact solve
        prep.error = str(exc)
    return prep


def _alignment(data: NTPData, W: np.ndarray, w_star: np.ndarray | None, w_mm: np.ndarray | None, eps: float,
               prep: AlignmentPrep) -> dict:
    """Where W sits relative to W*(H) and W^mm(H) (Thm. 2: P_F(W) → W*, W/‖W‖ → W^mm/‖W^mm‖), on the rows the
    theory constrains.

    Why not all V rows. A token that is never a next token in the data ("unseen": ~46k of SmolLM2's 49,152 at
    m = 2000) plays the same role in every constraint of Defs. 1-3, so W^mm's unseen rows are equal and W*'s are
    zero (:mod:`embgeo.ntp.measure.metrics`, (i)); the softmax ignores W → W + 1cᵀ (ii), and W^mm has zero column sums,
    so after that shift its unseen rows are ~0. A pretrained head's unseen rows differ from one another (about 90 % of
    ‖W‖² at SmolLM2's size), and that part is orthogonal to every matrix with equal unseen rows and zero column sums:
    cos(W, W^mm) ≤ ``cos_mm_bound`` = ‖P(W)‖/‖W‖ (:func:`embgeo.ntp.measure.metrics.equal_rows_bound`, ≈ ‖W_seen‖/‖W‖ ≈
    0.06-0.1), whatever the model — a statistic that cannot come out otherwise. It is kept, with its bound beside it.

    What is reported instead (:func:`embgeo.ntp.measure.metrics.constrained_alignment`): T(W), the seen rows and the
    mean unseen row, centred by their unweighted mean — invariant under W → W + 1cᵀ, and in the geometry of all pairwise
    row differences (the logit differences Defs. 1-3 constrain), each token once and the unseen block once:
    ``rows_cos_mm`` = cos(T W, T W^mm), ``rows_dist_mm``, ``rows_cos_corrected`` = cos(T(W − W*), T W^mm), each
    with the interval ``_lo``/``_hi`` that holds for the true W^mm when the NTP-SVM certifies only
    ‖Ŵ − W^mm‖ ≤ ε‖W^mm‖ (ε = ``svm_error_bound``; carried through T as ``rows_error_bound``); ``star_cos`` =
    cos(P_F(W), W*) and ``subspace_error`` = ‖P_F(W) − W*‖/‖W*‖ (already shift-free: 1cᵀ ⊥ F). The unseen block
    apart: ``unseen_share`` (of ‖W‖²), ``unseen_share_centred``, ``unseen_spread_share``, and the mean unseen row's
    logit against the in-support and seen rows (``unseen_logit_vs_support``, ``unseen_logit_vs_seen``; the same for
    W^mm as ``unseen_logit_vs_support_mm``). The old all-rows ``cos_mm``, ``cos_corrected`` (± 2ε) with
    ``cos_mm_bound``, ``cos_corrected_bound``; ``margin``: the normalized NTP-margin of P_⊥(W)
    (``prep``, :func:`_alignment_prep`). ``w_star``, ``w_mm`` (V, d) or None; ``eps``: W^mm's certified relative error
    (NaN when none).
    """
    out = {"cos_mm": math.nan, "cos_corrected": math.nan, "subspace_error": math.nan, "margin": prep.margin,
           "svm_error_bound": eps, "norm_W": float(np.linalg.norm(W)),
           "norm_w_star": math.nan if w_star is None else float(np.linalg.norm(w_star)),
           "norm_w_mm": math.nan if w_mm is None else float(np.linalg.norm(w_mm)),
           "cos_corrected_bound": math.nan, "unseen_logit_vs_support_mm": math.nan}
    seen, unseen = token_split(data)
    star = None if prep.PFW is None else w_star  # W* with P_F(W) only: the projection is not made again here
    out.update(constrained_alignment(data, W, w_star=star, w_mm=w_mm, error_bound=eps if eps == eps else 0.0,
                                     PFW=prep.PFW))
    if w_mm is not None:
        from embgeo.ntp.measure.metrics import unseen_block

        out["unseen_logit_vs_support_mm"] = unseen_block(data, w_mm, seen, unseen)["unseen_logit_vs_support"]
        if w_star is not None:
            D = W - w_star
            out["cos_corrected"] = cosine(D, w_mm)
            out["cos_corrected_bound"] = equal_rows_bound(D, seen, unseen)
    return out


#: The optimizers ``train_head`` accepts (those of :func:`embgeo.ntp.training.train.train` that run on the full loss).
HEAD_OPTIMIZERS = ("gd", "ngd", "adam")

#: The columns of a :func:`train_head` record.
HEAD_COLUMNS = ("step", "ce", "kl_gap", "norm", "subspace_error", "rows_cos_corrected", "rows_cos_corrected_lo",
                "rows_cos_corrected_hi", "rows_cos_mm", "cos_corrected")


def train_head(result: ProbeResult, optimizers: Sequence[str] = ("gd",), steps: int = 1000, lr: float | None = None,
               *, record_every="log", report: Callable[[str, ProbeResult], object] | None = None,
               started: Callable[[str], object] | None = None) -> dict:
    """Train a linear head from zero on the model's fixed H and watch Theorem 2 happen (or not): stage "train_head".

    For each optimizer (gd, ngd, adam) :func:`embgeo.ntp.training.train.train` runs ``steps`` full-batch updates from
    W = 0 on ``result.data`` (H, p̂, π̂ of the probe), reduced (``reduce_unseen=True``: the seen rows and one shared
    row for the never-next tokens — exact, since from zero those rows stay equal; no V × d matrix), ``lr`` its
    default when None (1/(2L) for gd, 0.01 for ngd and adam). Recorded on the log grid ``record_every``:
    CE − 𝓗 (a KL), ‖P_F(W_t) − W*‖/‖W*‖ and cos(T(W_t − W*), T W^mm) on the constrained rows with its certified
    band (:func:`_alignment`), plus ‖W_t‖ and the all-rows cos(W_t − W*, W^mm) (which IS meaningful here: W_t's
    unseen rows are equal).

    Theorem 2's prediction (GD, compatible and separable data): CE − 𝓗 → 0, P_F(W_t) → W*, and W_t/‖W_t‖ →
    W^mm/‖W^mm‖ (so cos(W_t − W*, W^mm) → 1). These are limits, which no finite run can confirm or contradict, so
    ``claims`` says per run and claim which way the run moved: ``trend toward`` (the predicted way over the run: the
    last value below the first, or the band's lower end above the first value's upper end), ``trend away`` (the
    other way beyond the band: on a short run a transient, e.g. ‖P_F(W_t) − W*‖ rising while ‖W_t‖ is still
    small), ``no trend`` (not separated from the start by the band), or ``not applicable`` with the reason — the
    data are not NTP-separable (then inf CE > 𝓗 and no W^mm exists: nothing to converge to), W* does not exist
    (not compatible), or W^mm is undecided (the NTP-SVM did not certify it) — or ``not covered`` (Adam: the theorem
    is about GD; the paper's Fig. 5 shows NGD and Adam empirically).

    Returns (and stores as ``result.head_training``) ``{"settings", "runs": {optimizer: {"lr", "rows",
    "claims", "seconds", "diverged"}}}``; ``result.seconds["train_head"]`` is the stage's time.
    """
    from embgeo.ntp.training.train import record_steps, train

    data = result.data
    if data is None:
        raise InputError("result: has no data (H) yet; train_head runs after the forward passes")
    if isinstance(optimizers, str):
        optimizers = [o for o in optimizers.split(",") if o]
    optimizers = list(dict.fromkeys(optimizers))
    bad = [o for o in optimizers if o not in HEAD_OPTIMIZERS]
    if bad or not optimizers:
        raise InputError(f"optimizers: expected some of {', '.join(HEAD_OPTIMIZERS)}, got {optimizers!r}")
    steps = check_positive_int("steps", steps, 1)
    if lr is not None:
        lr = check_float("lr", lr)
    record_steps(steps, record_every)  # checks record_every
    if started is not None:
        started("train_head")
    t = time.perf_counter()
    problem = ReducedProblem(data)
    eps = result.alignment.get("svm_error_bound", math.nan) if result.alignment else math.nan
    if eps != eps and result.svm is not None and result.svm.W is not None:
        eps = float(result.svm.residuals.get("error_bound", math.nan))
    w_star, w_mm = result.w_star, result.w_mm
    if result.separable is False:
        w_mm = None  # no W^mm exists; a Farkas certificate says so
    ref = None
    if w_star is not None or w_mm is not None:
        ref = reduced_reference(problem, w_star, w_mm, eps if eps == eps else 0.0)
    why = _head_applicability(result)
    runs = {}
    for opt in optimizers:
        t0 = time.perf_counter()
        trace = train(data, opt, lr, steps, init="zeros", reference=ref if ref is not None else False,
                      record_every=record_every, progress=False, reduce_unseen=True, expand=False)
        rows = [{c: r.get(c, math.nan) for c in HEAD_COLUMNS} for r in trace.rows]
        runs[opt] = {"lr": trace.meta["lr"], "rows": rows, "claims": _head_claims(opt, rows, why),
                     "seconds": time.perf_counter() - t0, "diverged": trace.meta.get("diverged_at_step")}
    result.head_training = {
        "settings": {"optimizers": optimizers, "steps": steps, "lr": lr, "init": "zeros",
                     "record_every": record_every, "reduced": {"seen_tokens": problem.k,
                                                               "unseen_tokens": problem.n_unseen},
                     "svm_error_bound": eps, "applicability": why},
        "runs": runs}
    _stage(result, report, "train_head", t)
    return result.head_training


def _head_applicability(result: ProbeResult) -> dict:
    """Per claim of Theorem 2: None (applicable) or why not."""
    sep, comp = result.separable, result.compatibility
    if sep is False:
        not_sep = ("not applicable: the data are not NTP-separable (a Farkas certificate, Def. 2): inf CE > 𝓗 and "
                   "no W^mm exists, so Theorem 2 predicts neither CE − 𝓗 → 0 nor a direction")
        return {"loss": not_sep, "subspace": not_sep, "direction": not_sep}
    out = {"loss": None, "subspace": None, "direction": None}
    if sep is None:
        und = "not applicable: NTP-separability is undecided (" + (result.errors.get("svm") or
                                                                  result.errors.get("separability") or "?") + ")"
        out = {"loss": und, "subspace": und, "direction": und}
    if not comp:
        why = ("not applicable: W* does not exist (the data are not NTP_H-compatible, Def. 1)" if comp is not None
               else "not applicable: compatibility is undecided (" + result.errors.get("compatibility", "?") + ")")
        out["subspace"] = out["direction"] = why
        if out["loss"] is None:
            out["loss"] = why
    if out["direction"] is None and (result.svm is None or result.svm.W is None):
        out["direction"] = "not applicable: W^mm is undecided (the NTP-SVM gave no certified point)"
    return out


def _head_claims(optimizer: str, rows: list[dict], why: dict) -> dict:
    """Theorem 2's three claims on one run's records (see :func:`train_head`)."""

    def trend(col: str, lo: str | None = None, hi: str | None = None, down: bool = True) -> dict:
        vals = [(r["step"], r[col], r[lo] if lo else r[col], r[hi] if hi else r[col]) for r in rows
                if r["step"] > 0 and r[col] == r[col]]  # step 0 is W = 0: no direction yet
        if len(vals) < 2:
            return {"status": "undecided", "why": "fewer than two finite records after step 0"}
        (first, v0, lo0, hi0), (last, v1, lo1, hi1) = vals[0], vals[-1]
        span = f"{v0:.4g} at step {first} → {v1:.4g} at step {last}"
        if down:
            status = "trend toward" if v1 < v0 else "trend away" if v1 > v0 else "no trend"
        else:  # upward, with bands: separated when the intervals do not overlap
            status = "trend toward" if lo1 > hi0 else "trend away" if hi1 < lo0 else "no trend"
            if lo0 != hi0 or lo1 != hi1:
                span += f" (bands [{lo0:.4g}, {hi0:.4g}] → [{lo1:.4g}, {hi1:.4g}])"
        return {"status": status, "why": span}

    out = {}
    specs = {"loss": ("kl_gap", None, None, True), "subspace": ("subspace_error", None, None, True),
             "direction": ("rows_cos_corrected", "rows_cos_corrected_lo", "rows_cos_corrected_hi", False)}
    for claim, (col, lo, hi, down) in specs.items():
        if why[claim] is not None:
            out[claim] = {"status": "not applicable", "why": why[claim]}
        elif optimizer == "adam" and claim == "direction":
            out[claim] = {"status": "not covered", "why": "Theorem 2 is about GD; Adam's implicit bias is another "
                                                          "(the paper shows it empirically, Fig. 5)",
                          "trend": trend(col, lo, hi, down)}
        else:
            out[claim] = trend(col, lo, hi, down)
            if optimizer != "gd":
                out[claim]["note"] = f"Theorem 2 is about GD; the paper shows {optimizer.upper()} empirically (Fig. 5)"
    return out


def logit_structure_factored(H: np.ndarray, W: np.ndarray, data: NTPData,
                             gram_max: int = GRAM_MAX) -> tuple[dict, dict]:
    """The measures of :func:`embgeo.ntp.measure.geometry.logit_structure` for L = H Wᵀ without forming L (m, V).

    H (m, d), W (V, d). ``‖L‖_F² = ⟨HᵀH, WᵀW⟩``; the singular values of L are those of R_H R_Wᵀ (d × d) from
    the QR factors of H and W; the logits on the supports are Σ_j S_j dot products; the margin
    min_j (min_{z∈S_j} L_jz − max_{v∉S_j} L_jv) comes from one pass over row blocks of L. The off-support
    part R = L − S (S: the row-centred in-support logits) is not low rank; its singular values come from the
    Gram R Rᵀ (m × m) or RᵀR (V × V), built from H, W and the sparse S, when its side is ≤ ``gram_max``
    (else ``effective_rank_rest`` and ``rank_rest`` are None). ``on_support_energy`` [our addition]:
    Σ_{z∈S_j} L_jz² / ‖L‖_F², the share of the logits' energy on the supports.

    Returns (scalars, arrays): arrays ``logit_singular_values``, ``rest_singular_values`` (when computed),
    ``support_logits_centred`` and ``support_log_probs_centred`` (CSR order of p̂), ``context_margins`` (m,).
    Cost O((m + V) d² + m V d), memory O((m + V) d) plus the blocks and the Gram.
    """
    m, V = data.m, data.V
    P, S = data.probs, data.support_sizes
    rows, cols = np.repeat(np.arange(m), S), P.indices
    logits = row_dots(W, H, cols, rows)  # w_zᵀ h_j on the supports
    logp = np.log(P.data)
    logits_c = logits - (np.bincount(rows, weights=logits, minlength=m) / S)[rows]
    logp_c = logp - (np.bincount(rows, weights=logp, minlength=m) / S)[rows]
    pi = data.weights[rows]
    num = math.sqrt(float(np.sum(pi * (logits_c - logp_c) ** 2)))
    den = math.sqrt(float(np.sum(pi * logp_c**2)))
    multi = bool(np.any(S > 1))
    HtH, WtW = H.T @ H, W.T @ W  # (d, d) each; the rest's Gram reuses them (WᵀW is O(V d²))
    norm2 = float(np.sum(HtH * WtW))
    s_L = np.linalg.svd(np.linalg.qr(H, mode="r") @ np.linalg.qr(W, mode="r").T, compute_uv=False)
    margins = _context_margins(H, W, data)
    has_off = S < V
    margin = float(margins[has_off].min()) if has_off.any() else math.nan
    norm_L = math.sqrt(norm2)
    scalars = {
        "support_residual": num / den if multi and den > 0 else math.nan,
        "support_residual_abs": num if multi else math.nan,
        "margin": margin,
        "margin_normalized": margin / norm_L if norm_L > 0 else math.nan,
        "contexts_ranked_right": float(np.mean(margins[has_off] > 0)) if has_off.any() else math.nan,
        "sparse_energy": float(np.sum(logits_c**2)) / norm2 if norm2 > 0 else math.nan,
        "on_support_energy": float(np.sum(logits**2)) / norm2 if norm2 > 0 else math.nan,
        "effective_rank": effective_rank_of(s_L),
        "effective_rank_rest": None, "rank_rest": None,
    }
    arrays = {"logit_singular_values": s_L, "support_logits_centred": logits_c, "support_log_probs_centred": logp_c,
              "context_margins": margins}
    if min(m, V) <= gram_max:
        s_R = _rest_singular_values(H, W, sp.csr_matrix((logits_c, P.indices, P.indptr), shape=(m, V)), (HtH, WtW))
        scalars.update(effective_rank_rest=effective_rank_of(s_R), rank_rest=numerical_rank_of(s_R, 1e-6))
        arrays["rest_singular_values"] = s_R
    return scalars, arrays


def _context_margins(H: np.ndarray, W: np.ndarray, data: NTPData) -> np.ndarray:
    """min_{z∈S_j} L_jz − max_{v∉S_j} L_jv per context (m,), +inf where S_j = V; L in row blocks."""
    P = data.probs
    out = np.full(data.m, np.inf)
    block = max(1, _BLOCK_BYTES // (8 * data.V))
    for s in range(0, data.m, block):
        e = min(s + block, data.m)
        Z = H[s:e] @ W.T
        rows = np.repeat(np.arange(e - s), data.support_sizes[s:e])
        cols = P.indices[P.indptr[s]:P.indptr[e]]
        lowest_in = np.full(e - s, np.inf)
        np.minimum.at(lowest_in, rows, Z[rows, cols])
        Z[rows, cols] = -np.inf
        out[s:e] = lowest_in - Z.max(axis=1)
    return out


def _rest_singular_values(H: np.ndarray, W: np.ndarray, Sc: sp.csr_matrix,
                          grams: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Singular values of R = H Wᵀ − Sc (descending) from the smaller of the Grams R Rᵀ, RᵀR; ``grams`` (HᵀH, WᵀW)
    when the caller has them (WᵀW costs O(V d²)).

    R Rᵀ = H (WᵀW) Hᵀ − (Sc W) Hᵀ − H (Sc W)ᵀ + Sc Scᵀ (and the same with the roles of H and W swapped);
    each of the four terms is at most (‖L‖_F + ‖Sc‖_F)² ≤ 4‖L‖_F² (Sc is centred entries of L), so G and its
    eigenvalues carry an absolute rounding error of about n·ε·4‖L‖_F² (n the Gram's side): singular values
    below √(4 n ε)·‖L‖_F (≈ 2e-7‖L‖_F at n = 5000) cannot be told from rounding and are set to 0.
    """
    m, V = Sc.shape
    HtH, WtW = grams if grams is not None else (H.T @ H, W.T @ W)
    if m <= V:
        A, B, S, GA, GB = H, W, Sc, HtH, WtW
    else:
        A, B, S, GA, GB = W, H, sp.csr_matrix(Sc.T), WtW, HtH
    n = A.shape[0]
    check_dense_size("the Gram of the logits' off-support part", (n, n))
    cross = (S @ B) @ A.T
    G = A @ GB @ A.T - cross - cross.T + (S @ S.T).toarray()
    ev = np.linalg.eigvalsh((G + G.T) / 2)[::-1]
    norm_L2 = float(np.sum(GA * GB))
    ev[ev < 4 * n * np.finfo(float).eps * norm_L2] = 0.0
    return np.sqrt(ev)


def _frequency(data: NTPData, W: np.ndarray) -> tuple[dict, dict]:
    """Row norms ‖w_v‖ against the next-token frequency f_v = Σ_j π̂_j p̂_{j,v} (Spearman over tokens with f_v > 0)."""
    from scipy.stats import spearmanr

    freq = np.asarray(data.probs.T @ data.weights).ravel()
    norms = np.linalg.norm(W, axis=1)
    seen = freq > 0
    rho = math.nan
    if seen.sum() >= 3 and np.ptp(freq[seen]) > 0 and np.ptp(norms[seen]) > 0:
        rho = float(spearmanr(norms[seen], freq[seen]).statistic)
    scalars = {"tokens_seen": int(seen.sum()), "spearman_norm_frequency": rho,
               "mean_norm_seen": float(norms[seen].mean()),
               "mean_norm_unseen": float(norms[~seen].mean()) if (~seen).any() else math.nan}
    return scalars, {"row_norms": norms, "token_frequency": freq}


# -- the probe -------------------------------------------------------------------------------------

def probe(hidden: HiddenFn, W, sequences: Sequence[Sequence[int]], *, context_length: int | None = None,
          prefixes: bool = False, window: int | None = None, max_contexts: int | None = None,
          sample: str = "random", seed: int = 0, batch_size: int = 32, device: str | torch.device = "cpu", bias=None,
          token_labels: Sequence[str] | None = None, max_seconds: float | None = DEFAULT_MAX_SECONDS,
          progress: bool = True, report: Callable[[str, ProbeResult], object] | None = None,
          solver_progress: Callable[[int, dict], object] | None = None, meta: dict | None = None,
          model: dict | None = None, separability_method: str = "auto",
          started: Callable[[str], object] | None = None,
          on_batch: Callable[[int, int], object] | None = None) -> ProbeResult:
    """The NTP geometry of any causal model on token sequences: contexts, H, W and :func:`measure`.

    Parameters
    ----------
    hidden : callable
        ``hidden(tokens)``: token ids, a torch.long tensor (B, L) on ``device`` → the final hidden states
        (B, L, d) of every position, what the head reads (after the final norm), of a causal model in eval
        mode, in any floating dtype (H is cast to float64; see :func:`hidden_states`; :func:`hf_hidden` makes
        one for a Hugging Face model).
    W : (V, d) array or tensor
        The head's weight: logits = W h (+ ``bias``); cast to float64.
    sequences : list of integer sequences
        The text as token ids, one sequence per unit (line, paragraph, stream window), ids in [0, V).
    context_length, prefixes, window :
        The contexts (:func:`count_contexts`): windows of k tokens, or every prefix up to ``window`` tokens.
    max_contexts, sample, seed :
        Keep ``max_contexts`` distinct contexts (:func:`select_contexts`): "random" (default; a uniform sample
        drawn with ``seed``), "frequent" (the most frequent) or "first".
    batch_size : int
        Sequences per forward pass (prefixes: sequences of similar length together, longest first).
    device : "cpu" | "cuda" | "cuda:N"
        Where the token batches go (:func:`embgeo.core.device.resolve_device`); ``hidden`` runs there.
    bias : (V,) array or tensor, optional
        The head's bias b, handled as an extra coordinate: h ↦ [h, 1], W ↦ [W, b] (d + 1 columns), so the
        logits are unchanged and the paper's bias-free form applies.
    token_labels : V names of the rows of W (for vocabulary.txt).
    max_seconds : float or None
        Time limit of the whole probe from this call (default :data:`DEFAULT_MAX_SECONDS`; None: none): the
        forward passes stop with :class:`~embgeo.errors.TooLargeError` past it, and the iterative solvers
        (separability, the NTP-SVM) share what is left (:func:`measure`).
    report, started : callable, optional
        ``started(stage)`` before each stage and ``report(stage, result)`` after it: "contexts" (sizes, the
        memory and time estimates), "hidden", then :func:`measure`'s.
    model : dict, optional
        :func:`model_info` of the model behind ``hidden``, for the memory and time estimates.
    separability_method : "auto" | "hinge" | "dual" | "lp"
        See :func:`measure`.
    on_batch : callable, optional
        ``on_batch(done, total)`` after each forward pass.

    Sizes and memory are checked before the forward passes (:func:`memory_estimate`, :func:`check_memory`):
    a V × d answer above the dense budget, or an estimate above the memory left, is a
    :class:`~embgeo.errors.TooLargeError` at once.
    """
    t0 = t = time.perf_counter()
    if max_seconds is not None:
        max_seconds = check_float("max_seconds", max_seconds)
    deadline = None if max_seconds is None else t0 + max_seconds
    W, bias = _head(W, bias)
    V, d = W.shape
    if token_labels is not None and len(token_labels) != V:
        raise ShapeError(f"token_labels: expected {V} labels (one per row of W), got {len(token_labels)}")
    if started is not None:
        started("contexts")
    contexts = count_contexts(sequences, V, context_length=context_length, prefixes=prefixes, window=window,
                              max_contexts=max_contexts, sample=sample, seed=seed)
    probs, weights = contexts.probs_and_weights()
    d_theory = d + (bias is not None)
    batch_size = check_positive_int("batch_size", batch_size)
    dev = resolve_device(device)
    res = ProbeResult(None, W, contexts, meta=dict(meta or {}), token_labels=None if token_labels is None
                      else [str(s) for s in token_labels])
    res.meta.update(mode=contexts.mode, context_length=contexts.context_length, window=contexts.window,
                    max_contexts=max_contexts, sample=sample, seed=seed, batch_size=batch_size,
                    head_bias="appended as a coordinate of h" if bias is not None else "none",
                    device=device_label(dev), max_seconds=max_seconds, separability_method=separability_method)
    plan = batch_plan(contexts, batch_size)
    res.memory = memory_estimate(probs, d_theory, model, plan)
    W_theory = W if bias is None else np.hstack([W, bias[:, None]])
    rates = {"forward": forward_rate(hidden, contexts, batch_size, dev, d), **pass_rates(probs, weights, W_theory)}
    res.estimate = time_estimate(plan, contexts.m, max_seconds, rates)
    check_memory(res.memory, V, d_theory)
    t = _stage(res, report, "contexts", t, started, "hidden")

    H = hidden_states(hidden, contexts, d=d, batch_size=batch_size, device=dev, progress=progress,
                      on_batch=on_batch, deadline=deadline)
    if bias is not None:
        H = np.hstack([H, np.ones((H.shape[0], 1))])
    W = W_theory
    data = NTPData(H, probs, weights, token_labels=res.token_labels)
    res.data, res.W = data, W
    t = _stage(res, report, "hidden", t)
    return measure(data, W, max_seconds=time_left(deadline), report=report, solver_progress=solver_progress, result=res,
                   after_solvers=res.estimate["after_solvers"],
                   separability_method=separability_method, started=started)


def _head(W, bias) -> tuple[np.ndarray, np.ndarray | None]:
    """W (V, d) and the bias (V,) or None, checked, as float64 numpy arrays (from any dtype, numpy or torch)."""
    if isinstance(W, torch.Tensor):
        W = W.detach().to("cpu", torch.float64).numpy()
    W = as_float_array("W", W, ndim=2)
    V = W.shape[0]
    if V < 2:
        raise ShapeError(f"W: expected a head of V >= 2 rows (tokens), got shape {W.shape}")
    if bias is not None:
        if isinstance(bias, torch.Tensor):
            bias = bias.detach().to("cpu", torch.float64).numpy()
        bias = as_float_array("bias", bias, ndim=1)
        if bias.shape != (V,):
            raise ShapeError(f"bias: expected one entry per row of W, shape ({V},), got {bias.shape}")
    return W, bias


# -- Hugging Face checkpoints (the `lm` extra) ----------------------------------------------------

def _transformers():
    """The transformers module, offline: HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE are set before it loads."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    try:
        import transformers
    except ImportError:
        raise MissingDependencyError("probing a Hugging Face checkpoint needs the PyPI package 'transformers': "
                                     "pip install 'embgeo[lm]'") from None
    return transformers


def _need_gguf() -> None:
    """GGUF files need the PyPI packages ``gguf`` (to read them) and ``accelerate`` (transformers loads with it)."""
    import importlib.util

    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingDependencyError(f"model: reading a GGUF file needs the PyPI package(s) {', '.join(missing)}: "
                                     "pip install 'embgeo[lm]'")


def is_gguf(path: str | PathLike) -> bool:
    """Whether ``path`` names a GGUF file (by its name: ``*.gguf``)."""
    return str(path).lower().endswith(".gguf")


def model_dtype(path: str | PathLike) -> str:
    """The dtype a checkpoint computes in by default: its config's ``dtype`` (or ``torch_dtype``) for a folder
    when it is one of :data:`DTYPES`, float32 otherwise (float16, or none given: float16 matmuls are slow or
    missing on CPUs) and for a GGUF file (its quantized weights are dequantized to float32)."""
    import json

    if is_gguf(path):
        return "float32"
    try:
        config = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "float32"
    own = (config.get("dtype") or config.get("torch_dtype")) if isinstance(config, dict) else None
    return own if own in DTYPES else "float32"


def _check_source(path: str | PathLike) -> Path:
    """The checkpoint's path, checked: a .gguf file, or a folder with config.json and a tokenizer."""
    p = Path(path)
    if is_gguf(p):
        if not p.is_file():
            raise InputError(f"model: {str(path)!r} is not a file; expected a GGUF file (*.gguf) or a folder written "
                             "by save_pretrained; nothing is downloaded")
        return p
    if not p.is_dir():
        raise InputError(f"model: {str(path)!r} is not a folder; expected a local folder written by save_pretrained "
                         "(config.json, the weights, the tokenizer files) or a GGUF file (*.gguf); nothing is "
                         "downloaded")
    if not (p / "config.json").is_file():
        raise InputError(f"model: {str(path)!r} has no config.json; expected a folder written by save_pretrained")
    if not any((p / name).is_file() for name in TOKENIZER_FILES):
        raise InputError(f"model: {str(path)!r} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); save it with "
                         "tokenizer.save_pretrained into the same folder")
    return p


def _first_line(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def load_causal_lm(path: str | PathLike, *, device: str | torch.device = "cpu", dtype: str | None = None):
    """(model, tokenizer) of a causal LM from a local folder (``save_pretrained``) or a GGUF file; never a download.

    ``AutoModelForCausalLM`` and ``AutoTokenizer`` with ``local_files_only=True`` (and HF_HUB_OFFLINE=1); a
    ``*.gguf`` file is read by transformers' GGUF loader (``gguf_file=``; the ``gguf`` and ``accelerate``
    packages), its weights dequantized, its tokenizer rebuilt from the file's metadata. The model is put in
    eval mode (no dropout) on ``device`` in ``dtype``: "bfloat16", "float32" or "float64"; None (default) is
    the model's own (:func:`model_dtype`). A missing path, a folder without ``config.json`` or a tokenizer, or
    files transformers cannot read are an :class:`InputError`.
    """
    p = _check_source(path)
    dev = resolve_device(device)
    dtype = model_dtype(p) if dtype is None else dtype
    if dtype not in DTYPES:
        raise InputError(f"dtype: expected one of {', '.join(DTYPES)} (or None: the model's own), got {dtype!r}")
    folder, gguf = (p.parent, {"gguf_file": p.name}) if is_gguf(p) else (p, {})
    if gguf:
        _need_gguf()
    tf = _transformers()
    try:
        tokenizer = tf.AutoTokenizer.from_pretrained(folder, local_files_only=True, **gguf)
    except Exception as exc:  # noqa: BLE001 - transformers raises many kinds; the user needs one line
        raise InputError(f"model {str(path)!r}: cannot load its tokenizer ({_first_line(exc)})"
                         + ("" if gguf else "; save it with tokenizer.save_pretrained into the same folder")) from None
    if not callable(tokenizer) or len(tokenizer) < 2:  # transformers builds an empty one from the config alone
        raise InputError(f"model {str(path)!r}: the tokenizer is empty ({len(tokenizer)} tokens)")
    try:
        model = tf.AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=DTYPES[dtype], **gguf)
    except Exception as exc:  # noqa: BLE001
        raise InputError(f"model {str(path)!r}: cannot load a causal language model ({_first_line(exc)})") from None
    model.eval()
    model.to(device=dev, dtype=DTYPES[dtype])
    return model, tokenizer


def model_info(lm) -> dict:
    """What the estimates need of a loaded Hugging Face model: ``parameters`` (count), ``forward_parameters``
    (those a forward pass up to the head multiplies with: all but the input embeddings and an untied head),
    ``parameter_bytes``,
    ``dtype_bytes`` (of its floating dtype), ``hidden_size``, ``intermediate_size`` (4 × hidden when the config
    has none) and ``heads``."""
    cfg = lm.config
    params = list(lm.parameters())
    width = getattr(cfg, "hidden_size", None) or getattr(cfg, "n_embd", None) or params[0].shape[-1]
    skipped = {id(m.weight): m.weight.numel() for m in (lm.get_input_embeddings(), lm.get_output_embeddings())
               if m is not None and isinstance(getattr(m, "weight", None), torch.Tensor)}
    total = int(sum(q.numel() for q in params))
    return {"parameters": total, "forward_parameters": max(total - int(sum(skipped.values())), 0),
            "parameter_bytes": int(sum(q.numel() * q.element_size() for q in params)),
            "dtype_bytes": int(next((q.element_size() for q in params if q.is_floating_point()), 4)),
            "hidden_size": int(width),
            "intermediate_size": int(getattr(cfg, "intermediate_size", None) or getattr(cfg, "n_inner", None)
                                     or 4 * width),
            "heads": int(getattr(cfg, "num_attention_heads", None) or getattr(cfg, "n_head", None) or 1)}


class _HeadInput(Exception):
    """Raised by the LM head's pre-hook once it has its input: the head itself never runs."""


def hf_hidden(model) -> HiddenFn:
    """``hidden(tokens)`` for a Hugging Face causal LM: the input of its LM head (B, L, d).

    A forward pre-hook on ``model.get_output_embeddings()`` takes what the head reads (after the final
    norm, whatever the architecture calls it) and stops the forward pass there, so the V-wide logits are
    never computed.
    """
    head = model.get_output_embeddings()
    if head is None:
        raise InputError(f"model: {type(model).__name__} has no LM head (get_output_embeddings() is None)")

    def hidden(tokens: torch.Tensor) -> torch.Tensor:
        box = {}

        def hook(_module, args):
            box["h"] = args[0]
            raise _HeadInput

        handle = head.register_forward_pre_hook(hook)
        try:
            model(input_ids=tokens, use_cache=False)
        except _HeadInput:
            pass
        finally:
            handle.remove()
        if "h" not in box:
            raise InputError(f"model: {type(model).__name__}'s forward pass never called its LM head")
        return box["h"]

    return hidden


def read_units(text: str | PathLike | Sequence[str], units: str = "paragraphs") -> list[str]:
    """A UTF-8 text file (or a list of its lines) as the strings that are tokenized one by one.

    ``units``: "paragraphs" (default) — blocks separated by blank lines, each block's lines stripped and joined
    by one space (hard-wrapped prose becomes one sequence per paragraph); "lines" — every non-blank line;
    "stream" — the whole text (its line ends kept) as one string, cut into the model's windows after
    tokenizing (:func:`cut_stream`). Empty or blank text is an :class:`InputError`.
    """
    if units not in UNITS:
        raise InputError(f"units: expected one of {', '.join(UNITS)}, got {units!r}")
    if isinstance(text, (str, PathLike)):
        lines = read_text_lines(text)
        where = f"text file {str(text)!r}"
    else:
        lines = list(text)
        if not all(isinstance(s, str) for s in lines):
            raise InputError("text: expected a file path or a list of strings")
        where = "text"
    if not any(s.strip() for s in lines):
        raise InputError(f"{where}: no text (empty, or blank lines only)")
    if units == "lines":
        return [s for s in lines if s.strip()]
    if units == "stream":
        return ["\n".join(lines).strip()]
    out, block = [], []
    for s in [*lines, ""]:
        if s.strip():
            block.append(s.strip())
        elif block:
            out.append(" ".join(block))
            block = []
    return out


def read_lines(text: str | PathLike | Sequence[str]) -> list[str]:
    """The non-blank lines of a UTF-8 text file (or of a list of strings), without their line ends
    (:func:`read_units` with ``units="lines"``)."""
    return read_units(text, "lines")


def cut_stream(tokens: Sequence[int], window: int, overlap: int = 1) -> list[list[int]]:
    """One long token sequence cut into pieces of at most ``window + 1`` tokens that overlap by ``overlap``.

    A piece of window + 1 tokens gives the prefixes of up to ``window`` tokens (the model's window) with their
    next tokens. ``overlap=1``: every token but the first is a next token in exactly one piece; ``overlap=k``
    (windows of k tokens): every (k tokens, next) pair of the whole sequence lies in exactly one piece. Returns
    a list of lists (the sequence itself when it fits).
    """
    window = check_positive_int("window", window)
    toks = list(tokens)
    if len(toks) <= window + 1:
        return [toks]
    if not 1 <= overlap <= window:
        raise InputError(f"overlap: expected 1..{window} tokens, got {overlap}")
    step = window + 1 - overlap
    return [toks[s:s + window + 1] for s in range(0, len(toks) - overlap, step)]


def probe_model(model: str | PathLike, text: str | PathLike | Sequence[str], *, context_length: int | None = None,
                prefixes: bool = False, max_contexts: int | None = None, sample: str = "random", seed: int = 0,
                units: str = "paragraphs", batch_size: int = 32, device: str | torch.device = "cpu",
                dtype: str | None = None, head_bias: str = "refuse", max_seconds: float | None = DEFAULT_MAX_SECONDS,
                progress: bool = True, report: Callable[[str, ProbeResult], object] | None = None,
                solver_progress: Callable[[int, dict], object] | None = None, separability_method: str = "auto",
                started: Callable[[str], object] | None = None,
                on_batch: Callable[[int, int], object] | None = None) -> ProbeResult:
    """:func:`probe` a causal LM — a Hugging Face folder or a GGUF file ``model`` — on ``text`` (a file or a list
    of lines) read as ``units`` (:func:`read_units`: paragraphs, lines or one stream).

    The units are tokenized one by one with the model's own tokenizer (its default special tokens); a stream is
    cut into pieces of the model's window (:func:`cut_stream`). The window of the prefixes is the model's
    ``max_position_embeddings``. The forward passes run in ``dtype`` (None: the model's own,
    :func:`model_dtype`); H is the input of the LM head (:func:`hf_hidden`) cast to float64, W its weight (tied
    to the input embeddings or not). A head with a bias is refused unless ``head_bias="append"`` (h ↦ [h, 1],
    W ↦ [W, b]: the geometry of a d + 1 dimensional problem). A tokenizer with more tokens than the head has
    rows is refused (it does not belong to this model). ``max_contexts``, ``sample``, ``seed``,
    ``max_seconds`` (from this call: loading the model counts), ``separability_method``, ``started`` and
    ``on_batch``: see :func:`probe`; ``started("load")`` comes before the model is loaded.
    """
    t0 = time.perf_counter()
    if head_bias not in ("refuse", "append"):
        raise InputError(f"head_bias: expected 'refuse' or 'append', got {head_bias!r}")
    texts = read_units(text, units)
    if started is not None:
        started("load")
    lm, tokenizer = load_causal_lm(model, device=device, dtype=dtype)
    load_seconds = time.perf_counter() - t0
    head = lm.get_output_embeddings()
    if head is None or not isinstance(getattr(head, "weight", None), torch.Tensor) or head.weight.ndim != 2:
        raise InputError(f"model {str(model)!r}: {type(lm).__name__} has no linear LM head to read W from")
    W = head.weight
    V = W.shape[0]
    bias = getattr(head, "bias", None)
    if bias is not None and head_bias == "refuse":
        raise InputError(f"model {str(model)!r}: the LM head has a bias ({V},); the paper's logits are W h without "
                         "one. Pass head_bias='append' (--head-bias append) to treat it as an extra coordinate of h "
                         "(h -> [h, 1], W -> [W, b])")
    n_tok = len(tokenizer)
    if n_tok > V:
        raise InputError(f"model {str(model)!r}: tokenizer/model mismatch: the tokenizer has {n_tok} tokens but the LM "
                         f"head has {V} rows; the tokenizer does not belong to this model")
    window = getattr(lm.config, "max_position_embeddings", None) or getattr(lm.config, "n_positions", None)
    sequences = tokenizer(texts)["input_ids"]
    if units == "stream" and window:
        sequences = cut_stream(sequences[0], window, overlap=1 if prefixes else min(context_length or 1, window))
    labels = tokenizer.convert_ids_to_tokens(list(range(n_tok))) + [f"<row {v}: no token>" for v in range(n_tok, V)]
    inputs = lm.get_input_embeddings()
    info = model_info(lm)
    meta = {"model": str(model), "format": "gguf" if is_gguf(model) else "folder", "architecture": type(lm).__name__,
            "dtype": str(next(lm.parameters()).dtype).removeprefix("torch."), "tokenizer_size": n_tok,
            "tied_head": inputs is not None and inputs.weight is W, "window": window,
            "parameters": info["parameters"], "units": units, "unit_count": len(texts),
            "sequences": len(sequences), "lines": len(texts), "load_seconds": load_seconds}
    # what the limit leaves after everything since this call began: loading, and reading the head, the tokenizer's
    # pass over the text and its labels (issue 38: ~7 s on a busy machine that only the load's seconds had counted)
    left = None if max_seconds is None else max(check_float("max_seconds", max_seconds) - (time.perf_counter() - t0),
                                                1e-3)
    res = probe(hf_hidden(lm), W, sequences, context_length=context_length, prefixes=prefixes, window=window,
                max_contexts=max_contexts, sample=sample, seed=seed, batch_size=batch_size, device=device,
                bias=bias if head_bias == "append" else None, token_labels=labels, max_seconds=left,
                progress=progress, report=report, solver_progress=solver_progress, meta=meta, model=info,
                separability_method=separability_method, started=started, on_batch=on_batch)
    res.seconds = {"load": load_seconds, **res.seconds}
    res.meta["max_seconds"] = max_seconds
    return res
