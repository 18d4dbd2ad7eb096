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
* :func:`probe`: the whole measurement from ``(hidden, W, sequences)``: the contexts, H, and the one analysis of
  the paper's objects that ``ntp analyze`` also makes (:func:`embgeo.ntp.analysis.analyze.analyze`, an
  :class:`~embgeo.ntp.analysis.analyze.Analysis`);
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
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
import torch

from embgeo.core import validate
from embgeo.core.deadline import past, time_left
from embgeo.core.device import device_label, resolve_device
from embgeo.core.validate import as_float_array, check_float, check_positive_int
from embgeo.errors import InputError, MissingDependencyError, ShapeError, TooLargeError
from embgeo.ntp import theory
from embgeo.ntp.analysis.analyze import Analysis, analyze_checked, builds_equality_system, head_work_bytes, stage_done
from embgeo.ntp.analysis.analyze import check_memory as _check_memory
from embgeo.ntp.data import NTPData, first_seen_rows, window_pairs
from embgeo.ntp.measure.alignment import blockwise_kl
from embgeo.ntp.measure.geometry import BLOCK_BYTES, GRAM_MAX, context_margins
from embgeo.ntp.measure.metrics import (
    ReducedProblem,
    reduced_reference,
)
from embgeo.ntp.solvers.outcome import ProgressFn
from embgeo.ntp.theory.separability import check_separability_method
from embgeo.text.reading import read_text_lines

#: The ``hidden`` callable's contract: token ids (B, L) → final hidden states (B, L, d) of every position.
HiddenFn = Callable[[torch.Tensor], torch.Tensor]

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
    for windows of k tokens (:func:`embgeo.ntp.data.window_pairs`, the counting NTPData.from_sequences uses)."""
    lengths = np.array([s.size for s in seqs], dtype=np.int64)
    flat = np.concatenate(seqs) if lengths.sum() else np.zeros(0, np.int64)
    info = {"skipped_sequences": int(np.count_nonzero(lengths <= k)), "truncated_sequences": 0}
    seq, rank, windows, nxt = window_pairs(flat, lengths, k)
    if seq.size == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty, empty, empty, info
    first, ids = first_seen_rows(windows)  # first[j]: the pair where context j first appears
    start = rank[first]
    return seq[first], start, start + k, ids, nxt, info


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

def hidden_states(hidden: HiddenFn, contexts: ProbeContexts, *, d: int | None = None, batch_size: int | None = None,
                  device: str | torch.device = "cpu", progress: bool = True,
                  on_batch: Callable[[int, int], object] | None = None, deadline: float | None = None,
                  first: ForwardTiming | None = None) -> np.ndarray:
    """H (m, d) float64: the final hidden state at the last position of every context.

    ``hidden(tokens)`` takes a torch.long tensor (B, L) of token ids on ``device`` and returns the final
    hidden states (B, L, d) of every position — what the LM head reads (after the final norm) — of a
    causal model in eval mode; it is called under ``torch.no_grad()``.

    * windows: the contexts (all of length k) in batches of ``batch_size`` (None: :func:`default_batch_size`); h_j is
      the state at position k.
    * prefixes: one pass per sequence holding a context's first appearance, padded on the right with
      token 0 to the longest in its batch; the prefix x_{<t} has the state at position t. This uses that
      the model is causal (position t − 1 reads only tokens < t), which is checked on the first batch:
      the first position is run again alone and must agree, else :class:`InputError`.

    ``d``: the expected width (W's), checked. A tqdm bar counts contexts; Ctrl-C raises KeyboardInterrupt.
    Whatever the model's dtype, H is returned in float64. ``on_batch(done, total)`` is called after each forward
    pass (batches done, batches in all); past ``deadline`` (a ``time.perf_counter()`` value) the next batch is
    not started: :class:`~embgeo.errors.TooLargeError` saying how far it got. ``first``: :func:`forward_rate`'s timing
    with the same ``batch_size``, whose states of the first batch's first rows are used instead of run again.
    """
    from tqdm.auto import tqdm

    if not callable(hidden):
        raise InputError(f"hidden: expected a callable hidden(tokens (B, L)) -> states (B, L, d), got "
                         f"{type(hidden).__name__}")
    batch_size = resolve_batch_size(contexts, batch_size)
    dev = resolve_device(device)
    m = contexts.m
    H: np.ndarray | None = None
    total = batch_plan(contexts, batch_size)["batches"]
    t0 = time.perf_counter()
    with torch.no_grad(), tqdm(total=m, desc="forward", unit="context", disable=None if progress else True,
                               leave=False) as bar:
        for done, (rows, batch, where, positions) in enumerate(_batches(contexts, batch_size)):
            if past(deadline):
                raise TooLargeError(f"the forward passes ran out of the time limit after {done} of {total} batches "
                                    f"({time.perf_counter() - t0:.0f} s): allow more time (max_seconds, --max-seconds) "
                                    "or use fewer contexts (max_contexts, --max-contexts)")
            tokens = torch.as_tensor(batch, dtype=torch.long, device=dev)
            if done == 0 and first is not None and first.states.shape[1] == tokens.shape[1] \
                    and first.rows <= tokens.shape[0]:
                rest = tokens[first.rows:]  # the timed rows are done (a causal model: rows do not see each other)
                states = first.states if not len(rest) else torch.cat([first.states, _call(hidden, rest, d)])
            else:
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


#: Sequences per forward pass when none is given: DEFAULT_BATCH_SIZE, or for windows of k tokens enough to hold
#: BATCH_POSITIONS positions (:func:`default_batch_size`).
DEFAULT_BATCH_SIZE = 32
BATCH_POSITIONS = 512


def default_batch_size(contexts: ProbeContexts) -> int:
    """Sequences per forward pass when the caller gives none: max(32, BATCH_POSITIONS // k) for windows of k tokens,
    32 for prefixes (whose batches hold the longest lines first). A pass of 32 windows of 2 tokens is mostly the
    model's per-call overhead: SmolLM2-135M on one thread took 1.34 ms per position at 32 × 2, 0.72 at 256 × 2 and
    0.80–0.85 at 512–2048 × 2 (k = 4: 0.92 at 32, 0.70 at 128), measured 2026-11-30."""
    if contexts.mode == "windows":
        return max(DEFAULT_BATCH_SIZE, BATCH_POSITIONS // contexts.context_length)
    return DEFAULT_BATCH_SIZE


def resolve_batch_size(contexts: ProbeContexts, batch_size: int | None) -> int:
    """``batch_size`` checked (an integer ≥ 1), or :func:`default_batch_size` for None."""
    return default_batch_size(contexts) if batch_size is None else check_positive_int("batch_size", batch_size)


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

def memory_estimate(probs: sp.csr_matrix, d: int, model: dict | None = None, plan: dict | None = None,
                    room: float = math.inf) -> dict:
    """Bytes the probe needs at most, by part, before any forward pass (probs (m, V) sparse, width d).

    The theory's parts (:func:`embgeo.ntp.theory.estimate_memory`: coordinates, the equality system of W*,
    the SVM's dual, the V × d answers) plus ``hidden_states`` H (m × d), ``head`` W (V × d), ``logit_blocks``
    (the row blocks of H Wᵀ in the loss and margin passes) and ``rest_gram`` (the m × m or V × V Gram of the
    logits' off-support part, when its side is at most GRAM_MAX). With ``model`` (:func:`model_info`) and
    ``plan`` (:func:`batch_plan`): ``model``, its parameters in their dtype (already in memory when the model is
    loaded), and ``forward_activations``, one batch's forward pass: B·L positions × (6 d + 2 d_ff) values (the
    residual stream, q, k, v, attention output, the MLP's two d_ff-wide temporaries of one layer: no gradients
    are kept, so layers do not add up) plus the attention scores B × heads × L × L where the model forms them
    (``model["attention_scores"]``, :func:`attention_scores_held`). ``total`` sums them all, but for an equality
    system that the analysis does not build
    (:func:`~embgeo.ntp.analysis.analyze.builds_equality_system`: dim F is then bounded, W* from certificates only):
    it stays listed, and ``equality_system_built`` is 0. The system is built when it fits the dense budget and the
    memory left beside the other parts: ``room`` (bytes the process can still allocate; the model and the process,
    already resident, are not taken from it) less those parts, as
    :func:`~embgeo.ntp.analysis.analyze.memory_plan` will decide it. ``head_work``: P_F(W) and one V × d difference
    (:func:`~embgeo.ntp.analysis.analyze.head_work_bytes`); with ``model``, ``process``: the resident memory now, less
    the model's parameters (libraries, the tokenizer, what loading left).
    Issue 38: at m = 100,000 contexts of SmolLM2 over the Vim documentation that system alone is 31.7 GiB, and
    counting it refused a probe that needs a few GiB.
    """
    import psutil

    m, V = probs.shape
    mem = dict(theory.estimate_memory(NTPData(np.zeros((m, d)), probs)))
    mem.pop("total")
    side = min(m, V)
    mem.update(hidden_states=8 * m * d, head=8 * V * d, head_work=head_work_bytes(V, d),
               logit_blocks=6 * BLOCK_BYTES, rest_gram=3 * 8 * side * side if side <= GRAM_MAX else 0)
    if model is not None and plan is not None:
        b, width, ff = model["dtype_bytes"], model["hidden_size"], model["intermediate_size"]
        mem["model"] = int(model["parameter_bytes"])
        # the process besides the model's parameters: libraries, the tokenizer, what loading left (Gemma 3 from its
        # GGUF file: 3.3 GiB resident after loading a 1.0 GiB model; issue 38)
        mem["process"] = max(int(psutil.Process().memory_info().rss) - mem["model"], 0)
        scores = model["heads"] * plan["longest"] if model.get("attention_scores", True) else 0
        mem["forward_activations"] = int(b * plan["largest"] * (6 * width + 2 * ff + scores))
    every = sum(mem.values())
    others = every - mem["equality_system"] - _resident(mem)
    skipped = 0 if builds_equality_system(mem["equality_system"], room - others) else mem["equality_system"]
    mem["total"] = int(every - skipped)
    mem["equality_system_built"] = int(not skipped)  # (after total: a flag, not bytes)
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


#: :func:`forward_rate` times the first rows of the first batch that hold at least this many token positions (the whole
#: batch when it is smaller). Timing the whole first batch, twice, cost 82 s before a prefix probe whose forward passes
#: took 49 s (issue 38: 800 prefixes of a 10,000-word text, its first batch the 32 longest paragraphs).
RATE_POSITIONS = 512


class ForwardTiming(NamedTuple):
    """What :func:`forward_rate` measured: ``rate``, seconds per token position, and the work it did on the way —
    ``states`` (rows, L, d), the hidden states of the first rows of the first batch, which :func:`hidden_states` takes
    as ``first`` instead of running them again."""

    rate: float
    states: torch.Tensor

    @property
    def rows(self) -> int:
        """The sequences timed (the first rows of the first batch)."""
        return int(self.states.shape[0])

    @property
    def positions(self) -> int:
        """The token positions timed (rows × L), which the forward passes need not run again."""
        return int(self.states.shape[0] * self.states.shape[1])


def forward_rate(hidden: HiddenFn, contexts: ProbeContexts, batch_size: int, device: torch.device,
                 d: int | None) -> ForwardTiming:
    """Seconds per token position of ``hidden`` on this machine, timed once on the first rows of its first batch
    (:func:`_batches`) that hold RATE_POSITIONS positions, after a warm-up call on its first few tokens; the states of
    those rows are kept (:class:`ForwardTiming`), so the timing costs the forward passes nothing but the warm-up (a
    prefix probe of one text as a stream: the timed row is 8,192 positions, 30 s). The first batch is the longest when
    the passes are padded prefixes, so per position this is an upper bound. Measured rather than counted:
    2 × parameters × positions at a nominal rate was 2–4× off (issue 38: attention, the norms and small batches of
    k = 2 positions are not in the parameter count)."""
    _, batch, _, _ = next(_batches(contexts, batch_size))
    B, L = batch.shape
    rows = min(B, -(-RATE_POSITIONS // L))  # ceil: at least one row
    tokens = torch.as_tensor(batch[:rows], dtype=torch.long, device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    with torch.no_grad():
        _call(hidden, tokens[:1, :min(L, 8)], d)  # the first call's one-time costs (allocation, kernel choice)
        sync()
        t0 = time.perf_counter()
        states = _call(hidden, tokens, d)
        sync()
    return ForwardTiming((time.perf_counter() - t0) / tokens.numel(), states)


def pass_rates(probs: sp.csr_matrix, weights: np.ndarray, W: np.ndarray, sample: int = 64,
               min_seconds: float = 0.05) -> dict:
    """Seconds per context of the probe's two kinds of pass over the logits, timed on this machine with the code
    that runs them: ``loss`` — :func:`~embgeo.ntp.measure.alignment.blockwise_kl`; ``margins`` —
    :func:`~embgeo.ntp.measure.geometry.context_margins` (the alignment's
    NTP-margin is the same kernel on P_⊥(W)); both on the first ``sample`` contexts' supports and the real W (V, d)
    with random embeddings (H is not known before the forward passes; the cost does not depend on its values); and
    ``fixed`` — :func:`_fixed_seconds`, the seconds of the structure pass that do not grow with m."""
    k = min(sample, probs.shape[0])
    rows = probs[:k]
    w = np.asarray(weights[:k], dtype=np.float64)
    H = np.random.default_rng(0).standard_normal((k, W.shape[1]))
    part = NTPData(H, rows, w / w.sum())
    loss = _seconds_per_call(lambda: blockwise_kl(part, W), min_seconds) / k
    margins = _seconds_per_call(lambda: context_margins(H, W, part), min_seconds) / k
    return {"loss": loss, "margins": margins, "fixed": _fixed_seconds(W, min_seconds)}


#: Rows of W on which the structure pass's fixed work is timed (:func:`_fixed_seconds`).
FIXED_SAMPLE_ROWS = 4096


def _fixed_seconds(W: np.ndarray, min_seconds: float) -> float:
    """Seconds of the work after the solvers that does not grow with m: the structure pass's QR factor of W and
    WᵀW (:func:`~embgeo.ntp.measure.geometry.logit_structure_factored`), O(V d²) each — timed on FIXED_SAMPLE_ROWS
    rows of W and scaled to V
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
    margins' two and the fixed work: :func:`~embgeo.ntp.analysis.analyze.analyze` keeps that time when it gives the
    exact solve its deadline, and
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
    """Refuse, before any forward pass, a V × d answer above the dense budget or an estimate above the memory left
    (:func:`embgeo.ntp.analysis.analyze.check_memory`, the analysis's one guard; the model is already loaded and the
    rest of the process resident, so neither is counted against the room)."""
    _check_memory(V, d, memory["total"] - _resident(memory), "the probe's exact paths",
                  "use fewer contexts (max_contexts, --max-contexts)")


def _resident(memory: dict) -> int:
    """The parts of a :func:`memory_estimate` already in memory when it is made: the model and the rest of the
    process (neither is taken from the memory left)."""
    return memory.get("model", 0) + memory.get("process", 0)


#: The optimizers ``train_head`` accepts (those of :func:`embgeo.ntp.training.train.train` that run on the full loss).
HEAD_OPTIMIZERS = ("gd", "ngd", "adam")

#: The columns of a :func:`train_head` record.
HEAD_COLUMNS = ("step", "ce", "kl_gap", "norm", "subspace_error", "rows_cos_corrected", "rows_cos_corrected_lo",
                "rows_cos_corrected_hi", "rows_cos_mm", "cos_corrected")


def train_head(result: Analysis, optimizers: Sequence[str] = ("gd",), steps: int = 1000, lr: float | None = None,
               *, record_every="log", report: Callable[[str, Analysis], object] | None = None,
               started: Callable[[str], object] | None = None, deadline: float | None = None) -> dict:
    """Train a linear head from zero on the model's fixed H and watch Theorem 2 happen (or not): stage "train_head".

    For each optimizer (gd, ngd, adam) :func:`embgeo.ntp.training.train.train` runs ``steps`` full-batch updates from
    W = 0 on ``result.data`` (H, p̂, π̂ of the probe), reduced (``reduce_unseen=True``: the seen rows and one shared
    row for the never-next tokens — exact, since from zero those rows stay equal; no V × d matrix), ``lr`` its
    default when None (1/(2L) for gd, 0.01 for ngd and adam). Recorded on the log grid ``record_every``:
    CE − 𝓗 (a KL), ‖P_F(W_t) − W*‖/‖W*‖ and cos(T(W_t − W*), T W^mm) on the constrained rows with its certified
    band (:func:`~embgeo.ntp.measure.alignment.alignment`), plus ‖W_t‖ and the all-rows cos(W_t − W*, W^mm) (which IS
    meaningful here: W_t's
    unseen rows are equal).

    Theorem 2's prediction (GD, compatible and separable data): CE − 𝓗 → 0, P_F(W_t) → W*, and W_t/‖W_t‖ →
    W^mm/‖W^mm‖ (so cos(W_t − W*, W^mm) → 1). These are limits, which no finite run can confirm or contradict, so
    ``claims`` says per run and claim which way the run moved: ``trend toward`` (the predicted way over the run: the
    last value below the first, or the band's lower end above the first value's upper end), ``trend away`` (the
    other way beyond the band: on a short run a transient, e.g. ‖P_F(W_t) − W*‖ rising while ‖W_t‖ is still
    small), ``no trend`` (not separated from the start by the band), or ``not applicable`` with the reason — the
    data are not NTP-separable (then inf CE > 𝓗 and no W^mm exists: nothing to converge to), W* does not exist
    (not compatible), or W^mm is undecided (the NTP-SVM did not certify it, or only to a relative error ≥ 1, which
    leaves its direction anywhere: the direction claim) — or ``not covered`` (Adam: the theorem is about GD; the
    paper's Fig. 5 shows NGD and Adam empirically).

    ``deadline`` (a ``time.perf_counter()`` value, None: no limit) is a wall: the optimizers share the time left
    equally, each in turn, and a run that reaches its share stops after the step in progress (that step recorded);
    its claims are judged on the steps it made, and ``stopped`` says after how many.

    Returns (and stores as ``result.head_training``) ``{"settings", "runs": {optimizer: {"lr", "rows",
    "claims", "seconds", "diverged", "stopped"}}}``; ``result.seconds["train_head"]`` is the stage's time.
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
    eps = _svm_error_bound(result)
    w_star, w_mm = result.w_star, result.w_mm
    if result.separable is False:
        w_mm = None  # no W^mm exists; a Farkas certificate says so
    ref = None
    if w_star is not None or w_mm is not None:
        ref = reduced_reference(problem, w_star, w_mm, eps if eps == eps else 0.0)
    why = _head_applicability(result)
    runs = {}
    for i, opt in enumerate(optimizers):
        t0 = time.perf_counter()
        # an equal share of the time left for each run still to come
        share = None if deadline is None else t0 + max(deadline - t0, 0.0) / (len(optimizers) - i)
        trace = train(data, opt, lr, steps, init="zeros", reference=ref if ref is not None else False,
                      record_every=record_every, progress=False, reduce_unseen=True, expand=False, deadline=share)
        rows = [{c: r.get(c, math.nan) for c in HEAD_COLUMNS} for r in trace.rows]
        claims = _head_claims(opt, rows, why)
        done = trace.meta.get("time_limit_at_step")
        stopped = None if done is None else f"the time limit after {done} of {steps} steps"
        if stopped is not None:
            for c in claims.values():
                c["why"] += f" ({stopped})"
        runs[opt] = {"lr": trace.meta["lr"], "rows": rows, "claims": claims, "seconds": time.perf_counter() - t0,
                     "diverged": trace.meta.get("diverged_at_step"), "stopped": stopped}
    result.head_training = {
        "settings": {"optimizers": optimizers, "steps": steps, "lr": lr, "init": "zeros",
                     "record_every": record_every, "reduced": {"seen_tokens": problem.k,
                                                               "unseen_tokens": problem.n_unseen},
                     "svm_error_bound": eps, "applicability": why},
        "runs": runs}
    stage_done(result, report, "train_head", t)
    return result.head_training


def _svm_error_bound(result: Analysis) -> float:
    """W^mm's certified relative error ε (‖Ŵ − W^mm‖ ≤ ε‖W^mm‖): the alignment's, else the NTP-SVM's own; NaN when
    neither has one."""
    eps = result.alignment.get("svm_error_bound", math.nan) if result.alignment else math.nan
    if eps != eps and result.svm is not None and result.svm.W is not None:
        eps = float(result.svm.residuals.get("error_bound", math.nan))
    return eps


def _head_applicability(result: Analysis) -> dict:
    """Per claim of Theorem 2: None (applicable) or why not (the reason alone: the claim's status says "not
    applicable")."""
    sep, comp = result.separable, result.compatibility
    if sep is False:
        not_sep = ("the data are not NTP-separable (a Farkas certificate, Def. 2): inf CE > 𝓗 and "
                   "no W^mm exists, so Theorem 2 predicts neither CE − 𝓗 → 0 nor a direction")
        return {"loss": not_sep, "subspace": not_sep, "direction": not_sep}
    out = {"loss": None, "subspace": None, "direction": None}
    if sep is None:
        und = "NTP-separability is undecided (" + (result.errors.get("svm") or
                                                                  result.errors.get("separability") or "?") + ")"
        out = {"loss": und, "subspace": und, "direction": und}
    if not comp:
        why = ("W* does not exist (the data are not NTP_H-compatible, Def. 1)" if comp is not None
               else "compatibility is undecided (" + result.errors.get("compatibility", "?") + ")")
        out["subspace"] = out["direction"] = why
        if out["loss"] is None:
            out["loss"] = why
    if out["direction"] is None and (result.svm is None or result.svm.W is None):
        out["direction"] = "W^mm is undecided (the NTP-SVM gave no certified point)"
    eps = _svm_error_bound(result)
    if out["direction"] is None and eps >= 1.0:
        # ‖Ŵ − W^mm‖ ≤ ε‖W^mm‖ with ε ≥ 1 leaves W^mm's direction anywhere: every cosine band is [−1, 1]
        out["direction"] = (f"W^mm's direction is not known (the NTP-SVM's point is certified only "
                            f"to a relative error of {eps:.3g} ≥ 1, e.g. a time limit before its first certified "
                            "point)")
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
                name = {"ngd": "NGD", "adam": "Adam"}[optimizer]
                out[claim]["note"] = f"Theorem 2 is about GD; the paper shows {name} empirically (Fig. 5)"
    return out



# -- the probe -------------------------------------------------------------------------------------

def probe(hidden: HiddenFn, W, sequences: Sequence[Sequence[int]], *, context_length: int | None = None,
          prefixes: bool = False, window: int | None = None, max_contexts: int | None = None,
          sample: str = "random", seed: int = 0, batch_size: int | None = None, device: str | torch.device = "cpu",
          bias=None, token_labels: Sequence[str] | None = None, max_seconds: float | None = DEFAULT_MAX_SECONDS,
          progress: bool = True, report: Callable[[str, Analysis], object] | None = None,
          solver_progress: ProgressFn | None = None, meta: dict | None = None,
          model: dict | None = None, separability_method: str = "auto",
          started: Callable[[str], object] | None = None,
          on_batch: Callable[[int, int], object] | None = None) -> Analysis:
    """The NTP geometry of any causal model on token sequences: contexts, H, W and the one analysis,
    :func:`~embgeo.ntp.analysis.analyze.analyze`.

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
    batch_size : int, optional
        Sequences per forward pass (prefixes: sequences of similar length together, longest first); None (default):
        :func:`default_batch_size` (32, or max(32, 512 // k) for windows of k tokens).
    device : "cpu" | "cuda" | "cuda:N"
        Where the token batches go (:func:`embgeo.core.device.resolve_device`); ``hidden`` runs there.
    bias : (V,) array or tensor, optional
        The head's bias b, handled as an extra coordinate: h ↦ [h, 1], W ↦ [W, b] (d + 1 columns), so the
        logits are unchanged and the paper's bias-free form applies.
    token_labels : V names of the rows of W (for vocabulary.txt).
    max_seconds : float or None
        Time limit of the whole probe from this call (default :data:`DEFAULT_MAX_SECONDS`; None: none): the
        forward passes stop with :class:`~embgeo.errors.TooLargeError` past it, and the iterative solvers
        (separability, the NTP-SVM) share what is left (:func:`~embgeo.ntp.analysis.analyze.analyze`).
    report, started : callable, optional
        ``started(stage)`` before each stage and ``report(stage, result)`` after it: "contexts" (sizes, the
        memory and time estimates), "hidden", then :func:`~embgeo.ntp.analysis.analyze.analyze`'s.
    model : dict, optional
        :func:`model_info` of the model behind ``hidden``, for the memory and time estimates.
    separability_method : "auto" | "hinge" | "dual" | "lp"
        See :func:`~embgeo.ntp.analysis.analyze.analyze`.
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
    check_separability_method(separability_method, "separability_method")  # here, before any forward pass
    if started is not None:
        started("contexts")
    contexts = count_contexts(sequences, V, context_length=context_length, prefixes=prefixes, window=window,
                              max_contexts=max_contexts, sample=sample, seed=seed)
    probs, weights = contexts.probs_and_weights()
    d_theory = d + (bias is not None)
    batch_size = resolve_batch_size(contexts, batch_size)
    dev = resolve_device(device)
    res = Analysis(None, W, contexts, meta=dict(meta or {}), input=contexts.info,
                   token_labels=None if token_labels is None else [str(s) for s in token_labels])
    res.meta.update(mode=contexts.mode, context_length=contexts.context_length, window=contexts.window,
                    max_contexts=max_contexts, sample=sample, seed=seed, batch_size=batch_size,
                    head_bias="appended as a coordinate of h" if bias is not None else "none",
                    device=device_label(dev), max_seconds=max_seconds, separability_method=separability_method)
    plan = batch_plan(contexts, batch_size)
    res.memory = memory_estimate(probs, d_theory, model, plan, room=validate.available_memory_bytes())
    W_theory = W if bias is None else np.hstack([W, bias[:, None]])
    timing = forward_rate(hidden, contexts, batch_size, dev, d)
    rates = {"forward": timing.rate, **pass_rates(probs, weights, W_theory)}
    # the forward passes still to run: the timed rows are done (hidden_states takes their states)
    left = dict(plan, tokens=plan["tokens"] - timing.positions)
    res.estimate = time_estimate(left, contexts.m, max_seconds, rates)
    check_memory(res.memory, V, d_theory)
    t = stage_done(res, report, "contexts", t, started, "hidden")

    H = hidden_states(hidden, contexts, d=d, batch_size=batch_size, device=dev, progress=progress,
                      on_batch=on_batch, deadline=deadline, first=timing)
    del timing
    if bias is not None:
        H = np.hstack([H, np.ones((H.shape[0], 1))])
    W = W_theory
    data = NTPData(H, probs, weights, token_labels=res.token_labels)
    res.data, res.W = data, W
    t = stage_done(res, report, "hidden", t)
    return analyze_checked(data, W, max_seconds=time_left(deadline), report=report, solver_progress=solver_progress,
                           result=res, after_solvers=res.estimate["after_solvers"],
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
    has none), ``heads`` and ``attention_scores``: whether a forward pass holds the B × heads × L × L attention scores
    (:func:`attention_scores_held`)."""
    cfg = lm.config
    params = list(lm.parameters())
    width = getattr(cfg, "hidden_size", None) or getattr(cfg, "n_embd", None) or params[0].shape[-1]
    skipped = {id(m.weight): m.weight.numel() for m in (lm.get_input_embeddings(), lm.get_output_embeddings())
               if m is not None and isinstance(getattr(m, "weight", None), torch.Tensor)}
    total = int(sum(q.numel() for q in params))
    dtype = next((q.dtype for q in params if q.is_floating_point()), torch.float32)  # the forward passes' dtype
    return {"parameters": total, "forward_parameters": max(total - int(sum(skipped.values())), 0),
            "parameter_bytes": int(sum(q.numel() * q.element_size() for q in params)),
            "dtype_bytes": int(dtype.itemsize),
            "hidden_size": int(width),
            "intermediate_size": int(getattr(cfg, "intermediate_size", None) or getattr(cfg, "n_inner", None)
                                     or 4 * width),
            "heads": int(getattr(cfg, "num_attention_heads", None) or getattr(cfg, "n_head", None) or 1),
            "attention_scores": attention_scores_held(getattr(cfg, "_attn_implementation", None), params[0].device.type,
                                                      dtype)}


def attention_scores_held(implementation: str | None, device_type: str, dtype: torch.dtype) -> bool:
    """Whether the model's attention forms its B × heads × L × L scores: yes for "eager" (or an unknown
    implementation), no for PyTorch's fused kernels ("sdpa") on the CPU, in float32 as in float64, nor on CUDA
    below float64 (its flash and memory-efficient kernels; float64 falls back to the one that forms them).
    Measured on SmolLM2-135M, CPU, one row of 4,096 tokens: eager +1.22 GiB over the loaded model, "sdpa" +0.00 GiB
    in float32 and +0.13 GiB in float64 (issue 38: the estimate had counted 4.9 GiB of scores for a stream's 8,192
    positions that peaked at 2.97 GiB in all)."""
    if implementation not in ("sdpa", "flash_attention_2"):
        return True
    return device_type == "cuda" and dtype == torch.float64


class _HeadInput(Exception):
    """Raised by the LM head's pre-hook once it has its input: the head itself never runs."""


def hf_hidden(model, start: Sequence[int] = ()) -> HiddenFn:
    """``hidden(tokens)`` for a Hugging Face causal LM: the input of its LM head (B, L, d).

    A forward pre-hook on ``model.get_output_embeddings()`` takes what the head reads (after the final
    norm, whatever the architecture calls it) and stops the forward pass there, so the V-wide logits are
    never computed. ``start``: token ids run before every row (the tokenizer's beginning-of-text tokens,
    :func:`start_tokens`); their states are dropped, so position t of the result is still the row's token t.
    """
    head = model.get_output_embeddings()
    if head is None:
        raise InputError(f"model: {type(model).__name__} has no LM head (get_output_embeddings() is None)")
    start = [int(t) for t in start]

    def hidden(tokens: torch.Tensor) -> torch.Tensor:
        if start:
            lead = torch.as_tensor(start, dtype=tokens.dtype, device=tokens.device).expand(tokens.shape[0], -1)
            tokens = torch.cat([lead, tokens], dim=1)
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
        return box["h"][:, len(start):]

    return hidden


#: How far (relative to their largest) a model's own logits may be from s·(W h + b) and still be read as a linear
#: head, by the dtype of its forward pass: its rounding of the head's product, with room (a final soft cap such as
#: Gemma 2's 30·tanh(z/30) moves the largest logits by percents to tens of percents).
LOGIT_TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 1e-2}


def head_logit_scale(lm, hidden: HiddenFn, W: torch.Tensor, bias: torch.Tensor | None, start: Sequence[int],
                     tokens: Sequence[int]) -> float:
    """s such that the model's own logits are s·(W h + b) at every position of ``tokens`` (run after ``start``),
    h the head's input (``hidden``); 1.0 for a plain linear head.

    Some architectures change the head's output before the softmax: Granite divides it by ``logits_scaling``,
    Cohere multiplies it by ``logit_scale`` — a scalar, so the model's own linear head is s W (and s b), which the
    probe then analyses — and Gemma 2 caps it softly (``final_logit_softcapping``: c·tanh(z/c)), which no linear
    head reproduces: an :class:`InputError`, since the paper's logits are W h. Decided by comparing the model's
    logits with W h on these few positions (one forward pass), within :data:`LOGIT_TOLERANCE` of their largest.
    """
    ids = torch.as_tensor([[*start, *tokens]], dtype=torch.long, device=W.device)
    with torch.no_grad():
        own = lm(input_ids=ids, use_cache=False).logits[0, len(start):].to(torch.float64)
        h = hidden(ids[:, len(start):])[0].to(torch.float64)
        lin = h @ W.to(torch.float64).T + (0.0 if bias is None else bias.to(torch.float64))
    if own.shape != lin.shape:
        raise InputError(f"model: its logits have shape {tuple(own.shape)}, its head's W h {tuple(lin.shape)}: the "
                         "head read is not the one the model applies")
    tol = LOGIT_TOLERANCE.get(next(lm.parameters()).dtype, 1e-4)
    top = float(own.abs().max())
    if top == 0.0 or float((own - lin).abs().max()) <= tol * top:
        return 1.0
    den = float((lin * lin).sum())
    s = float((own * lin).sum()) / den if den > 0 else 0.0
    gap = float((own - s * lin).abs().max()) / top
    if s > 0 and gap <= tol:
        return s
    cap = getattr(lm.config, "final_logit_softcapping", None)
    why = f" (its config's final_logit_softcapping = {cap}: c·tanh(z/c))" if cap else ""
    raise InputError(f"model: its logits are not a linear function W h + b of its head's input{why}: off by "
                     f"{gap:.1e} of their largest after the best scale ({s:.4g}), beyond {tol:.0e}. The paper's "
                     "theory (and this probe) is about linear logits W h; a model that reshapes them cannot be "
                     "probed as it is")


#: What precedes every context in the forward passes of :func:`probe_model`: "model" (the tokens the model's tokenizer
#: puts before a text, :func:`start_tokens`) or "none".
START_TOKENS = ("model", "none")


def start_tokens(tokenizer) -> list[int]:
    """The token ids ``tokenizer`` puts before every text (its beginning-of-text token: ``<bos>`` for Gemma and
    Llama 2; none for GPT-2 or SmolLM2): what its encoding of a text has before the text's own tokens.

    A model trained on texts that begin so predicts from the context alone badly: Gemma 3 270M on the Vim user manual
    (issue 38), windows of k = 2 tokens, CE 10.5 nats without ``<bos>`` against 5.3 with it (log V = 12.5). Tokens
    the tokenizer appends (an end-of-text token) are not returned. A tokenizer whose text tokens change with its
    special tokens is an :class:`InputError`.
    """
    probe_text = "The cat sat on the mat."
    full = list(tokenizer(probe_text)["input_ids"])
    bare = list(tokenizer(probe_text, add_special_tokens=False)["input_ids"])
    for i in range(len(full) - len(bare) + 1):
        if full[i:i + len(bare)] == bare:
            return full[:i]
    raise InputError(f"tokenizer: its tokens of a text change with its special tokens ({full} against {bare}), so "
                     "the tokens it puts before a text cannot be told apart; pass start='none' "
                     "(--start-tokens none)")


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
                units: str = "paragraphs", batch_size: int | None = None, device: str | torch.device = "cpu",
                dtype: str | None = None, head_bias: str = "refuse", start: str = "model",
                max_seconds: float | None = DEFAULT_MAX_SECONDS,
                progress: bool = True, report: Callable[[str, Analysis], object] | None = None,
                solver_progress: ProgressFn | None = None, separability_method: str = "auto",
                started: Callable[[str], object] | None = None,
                on_batch: Callable[[int, int], object] | None = None, loaded: tuple | None = None) -> Analysis:
    """:func:`probe` a causal LM — a Hugging Face folder or a GGUF file ``model`` — on ``text`` (a file or a list
    of lines) read as ``units`` (:func:`read_units`: paragraphs, lines or one stream).

    ``loaded``: (model, tokenizer) that :func:`load_causal_lm` returned for ``model`` with the same ``device`` and
    ``dtype``, to probe one model several times without loading it each time (the ``ntp-real-lm`` study: Gemma 3
    took 56 s a load); its load then takes no time of ``max_seconds``.

    The units are tokenized one by one with the model's own tokenizer, without its special tokens; a stream is
    cut into pieces of the model's window (:func:`cut_stream`). ``start``: "model" (default) runs the tokens the
    tokenizer puts before a text (:func:`start_tokens`: ``<bos>`` for Gemma and Llama 2, none for GPT-2) before
    every context, as the model saw them before every text it was trained on — they are not part of the contexts
    and take one position each of the window; "none" runs the contexts alone. The window of the prefixes is the
    model's ``max_position_embeddings`` less those tokens. The forward passes run in ``dtype`` (None: the model's own,
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
    if start not in START_TOKENS:
        raise InputError(f"start: expected one of {', '.join(START_TOKENS)}, got {start!r}")
    texts = read_units(text, units)
    if started is not None:
        started("load")
    lm, tokenizer = load_causal_lm(model, device=device, dtype=dtype) if loaded is None else loaded
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
    lead = start_tokens(tokenizer) if start == "model" else []
    if window and lead:
        if window <= len(lead):
            raise InputError(f"model {str(model)!r}: its window of {window} positions leaves none for a context "
                             f"after its {len(lead)} start tokens; pass start='none' (--start-tokens none)")
        window -= len(lead)
    sequences = tokenizer(texts, add_special_tokens=False)["input_ids"]
    if units == "stream" and window:
        sequences = cut_stream(sequences[0], window, overlap=1 if prefixes else min(context_length or 1, window))
    labels = tokenizer.convert_ids_to_tokens(list(range(n_tok))) + [f"<row {v}: no token>" for v in range(n_tok, V)]
    inputs = lm.get_input_embeddings()
    info = model_info(lm)
    meta = {"model": str(model), "format": "gguf" if is_gguf(model) else "folder", "architecture": type(lm).__name__,
            "dtype": str(next(lm.parameters()).dtype).removeprefix("torch."), "tokenizer_size": n_tok,
            "tied_head": inputs is not None and inputs.weight is W, "window": window,
            "start_tokens": [labels[t] if 0 <= t < len(labels) else str(t) for t in lead],
            "parameters": info["parameters"], "units": units, "unit_count": len(texts),
            "sequences": len(sequences), "lines": len(texts), "load_seconds": load_seconds}
    # the model's own logits against W h on the first sequence's first tokens: a scale is folded into W, a soft cap
    # refused (issue 38: Granite, Cohere and Gemma 2 reshape the head's output)
    first = next((q for q in sequences if len(q)), None)
    hidden = hf_hidden(lm, lead)
    if first is not None:
        scale = head_logit_scale(lm, hidden, W, bias, lead, list(first[:8]))
        if scale != 1.0:
            W = W * scale
            bias = None if bias is None else bias * scale
        meta["logit_scale"] = scale
    # what the limit leaves after everything since this call began: loading, and reading the head, the tokenizer's
    # pass over the text and its labels (issue 38: ~7 s on a busy machine that only the load's seconds had counted)
    left = None if max_seconds is None else max(check_float("max_seconds", max_seconds) - (time.perf_counter() - t0),
                                                1e-3)
    res = probe(hidden, W, sequences, context_length=context_length, prefixes=prefixes, window=window,
                max_contexts=max_contexts, sample=sample, seed=seed, batch_size=batch_size, device=device,
                bias=bias if head_bias == "append" else None, token_labels=labels, max_seconds=left,
                progress=progress, report=report, solver_progress=solver_progress, meta=meta, model=info,
                separability_method=separability_method, started=started, on_batch=on_batch)
    res.seconds = {"load": load_seconds, **res.seconds}
    res.meta["max_seconds"] = max_seconds
    return res
