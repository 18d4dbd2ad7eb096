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
* :func:`load_causal_lm`, :func:`hf_hidden`, :func:`probe_model`: a Hugging Face checkpoint folder
  (``transformers``, the ``lm`` extra), read from disk only, never downloaded.

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
from embgeo.ntp.constraints import row_dots
from embgeo.ntp.data import NTPData, first_seen_rows
from embgeo.ntp.geometry import effective_rank_of, numerical_rank_of
from embgeo.ntp.metrics import Reference, cosine, reference_metrics
from embgeo.text.reading import read_text_lines

#: The ``hidden`` callable's contract: token ids (B, L) → final hidden states (B, L, d) of every position.
HiddenFn = Callable[[torch.Tensor], torch.Tensor]

#: Largest side of the Gram matrix (m × m or V × V) whose eigenvalues give the singular values of the
#: logits' off-support part R (:func:`logit_structure_factored`); above it those ranks are not computed.
GRAM_MAX = 5000

#: Rows of the logits H Wᵀ formed at once in the block passes (bounds the (rows, V) temporaries).
_BLOCK_BYTES = 64 * 1024**2

DTYPES = {"float64": torch.float64, "float32": torch.float32}

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
                   prefixes: bool = False, window: int | None = None,
                   max_contexts: int | None = None) -> ProbeContexts:
    """Distinct contexts and next-token counts of token sequences (one per line of a text).

    Exactly one of ``context_length=k`` (every window of k + 1 consecutive tokens of a sequence gives a
    pair: its first k tokens, then the next) and ``prefixes=True`` (every prefix x_{<t} of a sequence,
    t = 1..min(len − 1, ``window``), gives the pair (x_{<t}, x_t): the contexts a causal LM conditions on
    within its window). Contexts are numbered in order of first appearance; ``max_contexts=N`` keeps the
    first N of them (their counts still come from the whole text; the pairs of the others are dropped and
    counted in ``info``). Token ids must lie in [0, V).

    Cost: O(n k) numpy work for the windows, one pass of a dict over the tokens for the prefixes.
    """
    V = check_positive_int("V", V, 2)
    if (context_length is None) == (not prefixes):
        raise InputError("context_length, prefixes: give one — context_length=k (windows of k tokens) or "
                         "prefixes=True (every prefix up to the model's window)")
    if max_contexts is not None:
        max_contexts = check_positive_int("max_contexts", max_contexts)
    if window is not None:
        window = check_positive_int("window", window)
    seqs = _check_sequences(sequences, V)
    if prefixes:
        if window is None:
            raise InputError("window: prefixes need the model's window (its longest context), got None")
        line, start, end, ctx_id, nxt, info = _prefix_pairs(seqs, window, max_contexts)
        mode, k = "prefixes", None
    else:
        k = check_positive_int("context_length", context_length)
        if window is not None and k > window:
            raise InputError(f"context_length: {k} tokens exceed the model's window of {window} positions")
        line, start, end, ctx_id, nxt, info = _window_pairs(seqs, k, max_contexts)
        mode = "windows"
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


def _window_pairs(seqs: list[np.ndarray], k: int, max_contexts: int | None):
    """(line, start, end, context id per pair, next token per pair, info) for windows of k tokens."""
    lengths = np.array([s.size for s in seqs], dtype=np.int64)
    flat = np.concatenate(seqs) if lengths.sum() else np.zeros(0, np.int64)
    per_seq = np.clip(lengths - k, 0, None)
    seq = np.repeat(np.arange(lengths.size), per_seq)
    r = np.arange(seq.size) - np.repeat(np.cumsum(per_seq) - per_seq, per_seq)  # window start within its line
    info = {"skipped_sequences": int(np.count_nonzero(per_seq == 0)), "truncated_sequences": 0}
    if seq.size == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty, empty, empty, {**info, "pairs_dropped": 0, "contexts_dropped": 0}
    pos = (np.concatenate([[0], np.cumsum(lengths)[:-1]])[seq] + r)
    windows = flat[pos[:, None] + np.arange(k)]
    first, ids = first_seen_rows(windows)  # first[j]: the pair where context j first appears
    nxt = flat[pos + k]
    n_kept = first.size if max_contexts is None else min(max_contexts, first.size)
    keep = ids < n_kept  # ids are in order of first appearance: the first n_kept contexts
    info.update(pairs_dropped=int((~keep).sum()), contexts_dropped=int(first.size - n_kept))
    first = first[:n_kept]
    start = r[first]
    return seq[first], start, start + k, ids[keep], nxt[keep], info


def _prefix_pairs(seqs: list[np.ndarray], window: int, max_contexts: int | None):
    """(line, start, end, context id per pair, next token per pair, info) for every prefix up to ``window``.

    A prefix is identified by (id of the prefix one token shorter, its last token), so equal prefixes of
    different lines are one context, found in one pass over the tokens. Every distinct prefix gets an
    id; those from ``max_contexts`` on are dropped with their pairs.
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
    ctx, nxt = np.array(pair_ctx, dtype=np.int64), np.array(pair_next, dtype=np.int64)
    line, end = np.array(line, dtype=np.int64), np.array(end, dtype=np.int64)
    n_kept = line.size if max_contexts is None else min(max_contexts, line.size)
    keep = ctx < n_kept
    info = {"skipped_sequences": int(np.count_nonzero(lengths < 2)),
            "truncated_sequences": int(np.count_nonzero(lengths > window + 1)),
            "pairs_dropped": int((~keep).sum()), "contexts_dropped": int(line.size - n_kept)}
    return line[:n_kept], np.zeros(n_kept, dtype=np.int64), end[:n_kept], ctx[keep], nxt[keep], info


# -- the model's final hidden states -----------------------------------------------------------------

def hidden_states(hidden: HiddenFn, contexts: ProbeContexts, *, d: int | None = None, batch_size: int = 32,
                  device: str | torch.device = "cpu", progress: bool = True) -> np.ndarray:
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
    """
    from tqdm.auto import tqdm

    if not callable(hidden):
        raise InputError(f"hidden: expected a callable hidden(tokens (B, L)) -> states (B, L, d), got "
                         f"{type(hidden).__name__}")
    batch_size = check_positive_int("batch_size", batch_size)
    dev = resolve_device(device)
    m = contexts.m
    H: np.ndarray | None = None
    with torch.no_grad(), tqdm(total=m, desc="forward", unit="context", disable=None if progress else True,
                               leave=False) as bar:
        for rows, batch, where, positions in _batches(contexts, batch_size):
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
    return as_float_array("hidden(tokens)", H, ndim=2)


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
    alone = _call(hidden, first, d)[0, 0].to(torch.float64)
    in_batch = in_batch.to(torch.float64)
    eps = torch.finfo(in_batch.dtype if in_batch.dtype != torch.float64 else alone.dtype).eps
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
    entropy, ce, kl_gap : float — 𝓗, CE(W) (eq. 2) and CE − 𝓗 computed as a KL (nats).
    compatibility : theory.Compatibility or None — Def. 1, with W*(H) when compatible.
    dim_F : int or None
    separability : theory.Separability or None — Def. 2, the model's W tried first as the certificate.
    svm : theory.NTPSVM or None — Def. 3, warm-started from the model's W.
    alignment : dict — ``cos_mm`` cos(W, W^mm), ``cos_corrected`` cos(W − W*, W^mm), ``subspace_error``
        ‖P_F(W) − W*‖/‖W*‖, ``margin`` the normalized NTP-margin of P_⊥(W), ``svm_error_bound`` ε (the cosines
        against W^mm are certified within 2ε), norms. NaN where an object does not exist (``errors`` or the
        compatibility / separability results say why).
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

    @property
    def w_star(self) -> np.ndarray | None:
        """W*(H) (V, d), when the data are compatible."""
        return self.compatibility.W if self.compatibility else None

    @property
    def w_mm(self) -> np.ndarray | None:
        """W^mm(H) (V, d) (the best certified point; see ``svm.residuals['error_bound']``), when separable."""
        return None if self.svm is None else self.svm.W

    def summary(self) -> dict:
        """A JSON-ready dict of every scalar (NaN as None)."""
        comp, sep, svm = self.compatibility, self.separability, self.svm
        data = self.data
        out = {
            "meta": self.meta,
            "input": None if self.contexts is None else self.contexts.info,
            "m": None if data is None else data.m, "V": int(self.W.shape[0]), "d": int(self.W.shape[1]),
            "memory_estimate_bytes": self.memory,
            "entropy_nats": self.entropy, "ce_nats": self.ce, "kl_gap_nats": self.kl_gap,
            "compatible": None if comp is None else bool(comp),
            "compatibility_residual": None if comp is None else comp.residual,
            "compatibility_method": None if comp is None else comp.method,
            "compatibility_certificate_norm": None if comp is None else comp.certificate_norm,
            "w_star_norm": None if not comp else float(np.linalg.norm(comp.W)),
            "dim_F": self.dim_F,
            "separable": None if sep is None else bool(sep),
            "separability_method": None if sep is None else sep.method,
            "separability_residuals": None if sep is None else sep.residuals,
            "svm_status": None if svm is None else svm.status,
            "ntp_margin_of_w_mm": None if svm is None or svm.W is None else svm.margin,
            "svm_residuals": None if svm is None or svm.W is None else svm.residuals,
            "alignment": self.alignment, "logits": self.logits, "frequency": self.frequency,
            "errors": self.errors, "seconds": self.seconds,
        }
        return _jsonable(out)

    def save(self, out: str | PathLike) -> list[str]:
        """Write summary.json, the arrays (.npy/.npz), vocabulary.txt and the figure (PNG + PDF) to ``out``.

        Files: ``summary.json``; ``H.npy`` (m, d) and ``W.npy`` (V, d); ``next_token_counts.npz`` (sparse
        (m, V) counts n_{j,z}) and ``contexts.npz`` (``tokens`` concatenated, ``offsets`` (m + 1,)) with a
        probe; ``weights.npy`` π̂; ``W_star.npy`` and ``W_mm.npy`` where they exist; the arrays of
        ``self.arrays``; ``vocabulary.txt`` (line z names row z of W); ``probe.png``/``probe.pdf``.
        Returns the names written.
        """
        import json

        import matplotlib.pyplot as plt

        from embgeo.ntp.figures import probe_figure

        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        written = []

        def npy(name: str, arr) -> None:
            np.save(out / f"{name}.npy", arr)
            written.append(f"{name}.npy")

        if self.data is not None:
            npy("H", self.data.embeddings)
            npy("weights", self.data.weights)
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


def memory_estimate(probs: sp.csr_matrix, d: int) -> dict:
    """Bytes the probe needs at most, by part, before any forward pass (probs (m, V) sparse, width d).

    The theory's parts (:func:`embgeo.ntp.theory.estimate_memory`: coordinates, the equality system of W*,
    the SVM's dual, the V × d answers) plus ``hidden_states`` H (m × d), ``head`` W (V × d), ``logit_blocks``
    (the row blocks of H Wᵀ in the loss and margin passes) and ``rest_gram`` (the m × m or V × V Gram of the
    logits' off-support part, when its side is at most GRAM_MAX). ``total`` sums them.
    """
    m, V = probs.shape
    mem = dict(theory.estimate_memory(NTPData(np.zeros((m, d)), probs)))
    mem.pop("total")
    side = min(m, V)
    mem.update(hidden_states=8 * m * d, head=8 * V * d, logit_blocks=6 * _BLOCK_BYTES,
               rest_gram=3 * 8 * side * side if side <= GRAM_MAX else 0)
    mem["total"] = int(sum(mem.values()))
    return mem


def check_memory(memory: dict, V: int, d: int) -> None:
    """Refuse, before any work, a V × d answer above the dense budget or an estimate above the memory left."""
    one_w = 8 * V * d
    if one_w > DENSE_BUDGET_BYTES:
        raise TooLargeError(f"W, W* and W^mm are V × d = {V} × {d} float64 matrices of {one_w / 1024**3:.2f} GiB each "
                            f"(budget {DENSE_BUDGET_BYTES / 1024**3:.2f} GiB)")
    room = available_memory_bytes()
    if memory["total"] > room:
        raise TooLargeError(f"the probe's exact paths need up to {memory['total'] / 1024**3:.2f} GiB but this process "
                            f"can allocate only {room / 1024**3:.2f} GiB more: use fewer contexts (max_contexts)")


def _stage(result: ProbeResult, report, name: str, t0: float) -> float:
    """Record the stage's time, tell ``report``; returns the clock for the next stage."""
    now = time.perf_counter()
    result.seconds[name] = now - t0
    if report is not None:
        report(name, result)
    return time.perf_counter()


def measure(data: NTPData, W, *, max_seconds: float | None = None,
            report: Callable[[str, ProbeResult], object] | None = None,
            solver_progress: Callable[[int, dict], object] | None = None,
            result: ProbeResult | None = None) -> ProbeResult:
    """The NTP paper's objects for the embeddings H = ``data.embeddings`` (m, d) and the decoder W (V, d).

    In order (``report(stage, result)`` is called after each, for printing as they are found):
    ``"loss"``: 𝓗, CE(W) − 𝓗 as a KL (:func:`theory.kl_gap`, over row blocks of the logits) and CE(W) (eq. 2)
    as 𝓗 + KL;
    ``"compatibility"``: Def. 1 (W*(H) or the certificate that (4) has no solution) and dim F (eq. 5);
    ``"separability"``: Def. 2, W tried first as the certificate (``candidate=W``: exact when P_⊥(W) has all
    margins > 0); ``"svm"``: W^mm(H) (Def. 3) by the augmented Lagrangian warm-started from W, when separable or
    undecided;
    ``"alignment"``: cos(W, W^mm), cos(W − W*, W^mm), ‖P_F(W) − W*‖/‖W*‖ and the normalized NTP-margin of
    P_⊥(W) (:func:`embgeo.ntp.metrics.reference_metrics`); ``"geometry"``: the logits' structure
    (:func:`logit_structure_factored`) and the rows' norms against token frequency.

    The iterative solvers (separability's, the NTP-SVM) stop after ``max_seconds`` each and call
    ``solver_progress(iteration, info)`` (``info["gap"]``: the relative duality gap); a problem one of
    them cannot decide, or that the memory budget refuses, leaves its objects None and says why in
    ``result.errors`` (never an exception: the rest is still measured).
    """
    if not isinstance(data, NTPData):
        raise InputError(f"data: expected an embgeo.ntp.NTPData, got {type(data).__name__}")
    W = as_float_array("W", W, ndim=2)
    if W.shape != (data.V, data.d):
        raise ShapeError(f"W: expected shape (V, d) = ({data.V}, {data.d}) to match the data, got {W.shape}")
    if max_seconds is not None:
        max_seconds = check_float("max_seconds", max_seconds)
    res = result if result is not None else ProbeResult(data, W)
    res.data, res.W = data, W
    t = time.perf_counter()

    res.entropy = theory.entropy(data)
    res.kl_gap = _blockwise_kl(data, W)
    res.ce = res.entropy + res.kl_gap  # a sum of two non-negative terms: exact to rounding, one pass fewer
    t = _stage(res, report, "loss", t)

    F = theory.subspace(data)
    try:
        res.compatibility = theory.is_compatible(data, F)
    except (SolverError, TooLargeError) as exc:
        res.errors["compatibility"] = str(exc)
    try:
        res.dim_F = F.dim
    except TooLargeError as exc:
        res.errors["dim_F"] = str(exc)
    t = _stage(res, report, "compatibility", t)

    full = bool(np.all(data.support_sizes == data.V))
    if full:
        res.errors["separability"] = "every support is the whole vocabulary: no separability constraints (6b)"
    else:
        try:
            res.separability = theory.is_separable(data, F, candidate=W, max_seconds=max_seconds,
                                                   progress=solver_progress)
        except (SolverError, TooLargeError) as exc:
            res.errors["separability"] = str(exc)
    t = _stage(res, report, "separability", t)

    if not full and (res.separability is None or res.separability):
        try:
            # The ALM at every rank: it is the solver the warm start W reaches (the dual route ignores it), and on
            # a trained model's H (separable by W itself) it was 50-100x faster than the dual even with rank H = m.
            res.svm = theory.ntp_svm(data, subspace_=F, separability=res.separability, warm_start=W, method="alm",
                                     max_seconds=max_seconds, progress=solver_progress)
        except (SolverError, TooLargeError) as exc:
            res.errors["svm"] = str(exc)
        if res.separability is None and res.svm is not None:
            res.separability = res.svm.separability
    t = _stage(res, report, "svm", t)

    res.alignment = _alignment(data, W, F, res)
    t = _stage(res, report, "alignment", t)

    res.logits, arrays = logit_structure_factored(data.embeddings, W, data)
    res.frequency, freq_arrays = _frequency(data, W)
    res.arrays = {**arrays, **freq_arrays}
    _stage(res, report, "geometry", t)
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


def _alignment(data: NTPData, W: np.ndarray, F: theory.Subspace, res: ProbeResult) -> dict:
    """Where W sits relative to W*(H) and W^mm(H) (Thm. 2: P_F(W) → W*, W/‖W‖ → W^mm/‖W^mm‖)."""
    out = {"cos_mm": math.nan, "cos_corrected": math.nan, "subspace_error": math.nan, "margin": math.nan,
           "svm_error_bound": math.nan, "norm_W": float(np.linalg.norm(W)),
           "norm_w_star": math.nan if res.w_star is None else float(np.linalg.norm(res.w_star)),
           "norm_w_mm": math.nan if res.w_mm is None else float(np.linalg.norm(res.w_mm))}
    try:
        if res.w_star is not None and res.w_mm is not None:
            out.update(reference_metrics(data, W, Reference(res.w_star, res.w_mm, F)))
        else:
            if res.w_star is not None:
                ns, err = np.linalg.norm(res.w_star), np.linalg.norm(F.project(W) - res.w_star)
                out["subspace_error"] = float(err / ns) if ns > 0 else float(err)
            if res.w_mm is not None:
                out["cos_mm"] = cosine(W, res.w_mm)
            if not np.all(data.support_sizes == data.V):
                out["margin"] = theory.ntp_margin(data, W, F)
    except TooLargeError as exc:
        res.errors["alignment"] = str(exc)
    if res.svm is not None and res.svm.W is not None:
        out["svm_error_bound"] = float(res.svm.residuals.get("error_bound", math.nan))
    return out


def logit_structure_factored(H: np.ndarray, W: np.ndarray, data: NTPData,
                             gram_max: int = GRAM_MAX) -> tuple[dict, dict]:
    """The measures of :func:`embgeo.ntp.geometry.logit_structure` for L = H Wᵀ without forming L (m, V).

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
    norm2 = float(np.sum((H.T @ H) * (W.T @ W)))
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
        s_R = _rest_singular_values(H, W, sp.csr_matrix((logits_c, P.indices, P.indptr), shape=(m, V)))
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


def _rest_singular_values(H: np.ndarray, W: np.ndarray, Sc: sp.csr_matrix) -> np.ndarray:
    """Singular values of R = H Wᵀ − Sc (descending) from the smaller of the Grams R Rᵀ, RᵀR.

    R Rᵀ = H (WᵀW) Hᵀ − (Sc W) Hᵀ − H (Sc W)ᵀ + Sc Scᵀ (and the same with the roles of H and W swapped);
    each of the four terms is at most (‖L‖_F + ‖Sc‖_F)² ≤ 4‖L‖_F² (Sc is centred entries of L), so G and its
    eigenvalues carry an absolute rounding error of about n·ε·4‖L‖_F² (n the Gram's side): singular values
    below √(4 n ε)·‖L‖_F (≈ 2e-7‖L‖_F at n = 5000) cannot be told from rounding and are set to 0.
    """
    m, V = Sc.shape
    if m <= V:
        A, B, S = H, W, Sc
    else:
        A, B, S = W, H, sp.csr_matrix(Sc.T)
    n = A.shape[0]
    check_dense_size("the Gram of the logits' off-support part", (n, n))
    GB = B.T @ B
    cross = (S @ B) @ A.T
    G = A @ GB @ A.T - cross - cross.T + (S @ S.T).toarray()
    ev = np.linalg.eigvalsh((G + G.T) / 2)[::-1]
    norm_L2 = float(np.sum((A.T @ A) * GB))
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
          batch_size: int = 32, device: str | torch.device = "cpu", bias=None,
          token_labels: Sequence[str] | None = None, max_seconds: float | None = None, progress: bool = True,
          report: Callable[[str, ProbeResult], object] | None = None,
          solver_progress: Callable[[int, dict], object] | None = None, meta: dict | None = None) -> ProbeResult:
    """The NTP geometry of any causal model on token sequences: contexts, H, W and :func:`measure`.

    Parameters
    ----------
    hidden : callable
        ``hidden(tokens)``: token ids, a torch.long tensor (B, L) on ``device`` → the final hidden states
        (B, L, d) of every position, what the head reads (after the final norm), of a causal model in eval
        mode (see :func:`hidden_states`; :func:`hf_hidden` makes one for a Hugging Face model).
    W : (V, d) array or tensor
        The head's weight: logits = W h (+ ``bias``).
    sequences : list of integer sequences
        The text as token ids, one sequence per line (ids in [0, V)).
    context_length, prefixes, window, max_contexts :
        The contexts (:func:`count_contexts`): windows of k tokens, or every prefix up to ``window`` tokens.
    batch_size : int
        Sequences per forward pass.
    device : "cpu" | "cuda" | "cuda:N"
        Where the token batches go (:func:`embgeo.core.device.resolve_device`); ``hidden`` runs there.
    bias : (V,) array or tensor, optional
        The head's bias b, handled as an extra coordinate: h ↦ [h, 1], W ↦ [W, b] (d + 1 columns), so the
        logits are unchanged and the paper's bias-free form applies.
    token_labels : V names of the rows of W (for vocabulary.txt).
    max_seconds : float, optional
        Time limit of each iterative solver (separability, the NTP-SVM).
    report : callable, optional
        ``report(stage, result)`` after each stage: "contexts" (sizes, the memory estimate), "hidden", then
        :func:`measure`'s.

    Sizes and memory are checked before the forward passes (:func:`memory_estimate`, :func:`check_memory`):
    a V × d answer above the dense budget, or an estimate above the memory left, is a
    :class:`~embgeo.errors.TooLargeError` at once.
    """
    if isinstance(W, torch.Tensor):
        W = W.detach().to("cpu", torch.float64).numpy()
    W = as_float_array("W", W, ndim=2)
    V, d = W.shape
    if V < 2:
        raise ShapeError(f"W: expected a head of V >= 2 rows (tokens), got shape {W.shape}")
    if bias is not None:
        if isinstance(bias, torch.Tensor):
            bias = bias.detach().to("cpu", torch.float64).numpy()
        bias = as_float_array("bias", bias, ndim=1)
        if bias.shape != (V,):
            raise ShapeError(f"bias: expected one entry per row of W, shape ({V},), got {bias.shape}")
    if token_labels is not None and len(token_labels) != V:
        raise ShapeError(f"token_labels: expected {V} labels (one per row of W), got {len(token_labels)}")
    t = time.perf_counter()
    contexts = count_contexts(sequences, V, context_length=context_length, prefixes=prefixes, window=window,
                              max_contexts=max_contexts)
    probs, weights = contexts.probs_and_weights()
    d_theory = d + (bias is not None)
    res = ProbeResult(None, W, contexts, meta=dict(meta or {}), token_labels=None if token_labels is None
                      else [str(s) for s in token_labels])
    res.meta.update(mode=contexts.mode, context_length=contexts.context_length, window=contexts.window,
                    max_contexts=max_contexts, batch_size=batch_size, head_bias="appended as a coordinate of h"
                    if bias is not None else "none", device=device_label(resolve_device(device)))
    res.memory = memory_estimate(probs, d_theory)
    check_memory(res.memory, V, d_theory)
    t = _stage(res, report, "contexts", t)

    H = hidden_states(hidden, contexts, d=d, batch_size=batch_size, device=device, progress=progress)
    if bias is not None:
        H = np.hstack([H, np.ones((H.shape[0], 1))])
        W = np.hstack([W, bias[:, None]])
    data = NTPData(H, probs, weights, token_labels=res.token_labels)
    res.data, res.W = data, W
    t = _stage(res, report, "hidden", t)
    return measure(data, W, max_seconds=max_seconds, report=report, solver_progress=solver_progress, result=res)


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


def load_causal_lm(path: str | PathLike, *, device: str | torch.device = "cpu", dtype: str = "float64"):
    """(model, tokenizer) of a causal LM saved in a local folder (``save_pretrained``); never a download.

    ``AutoModelForCausalLM`` and ``AutoTokenizer`` with ``local_files_only=True`` (and HF_HUB_OFFLINE=1).
    The model is put in eval mode (no dropout) on ``device`` in ``dtype`` ("float64", the default, computes
    the checkpoint's function without float32 rounding; "float32" for speed). A missing folder, one
    without ``config.json``, or files transformers cannot read are an :class:`InputError`.
    """
    p = Path(path)
    if not p.is_dir():
        raise InputError(f"model: {str(path)!r} is not a folder; expected a local folder written by save_pretrained "
                         "(config.json, the weights, the tokenizer files); nothing is downloaded")
    if not (p / "config.json").is_file():
        raise InputError(f"model: {str(path)!r} has no config.json; expected a folder written by save_pretrained")
    if not any((p / name).is_file() for name in TOKENIZER_FILES):
        raise InputError(f"model: {str(path)!r} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); save it with "
                         "tokenizer.save_pretrained into the same folder")
    dev = resolve_device(device)
    if dtype not in DTYPES:
        raise InputError(f"dtype: expected one of {sorted(DTYPES)}, got {dtype!r}")
    tf = _transformers()
    try:
        tokenizer = tf.AutoTokenizer.from_pretrained(p, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - transformers raises many kinds; the user needs one line
        raise InputError(f"model {str(path)!r}: cannot load its tokenizer ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}); save it with tokenizer.save_pretrained"
                         " into the same folder") from None
    if not callable(tokenizer) or len(tokenizer) < 2:  # transformers builds an empty one from the config alone
        raise InputError(f"model {str(path)!r}: the tokenizer in the folder is empty ({len(tokenizer)} tokens)")
    try:
        model = tf.AutoModelForCausalLM.from_pretrained(p, local_files_only=True)
    except Exception as exc:  # noqa: BLE001
        raise InputError(f"model {str(path)!r}: cannot load a causal language model ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    model.eval()
    model.to(device=dev, dtype=DTYPES[dtype])
    return model, tokenizer


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


def read_lines(text: str | PathLike | Sequence[str]) -> list[str]:
    """The non-blank lines of a UTF-8 text file (or of a list of strings), without their line ends."""
    if isinstance(text, (str, PathLike)):
        lines = read_text_lines(text)
        where = f"text file {str(text)!r}"
    else:
        lines = list(text)
        if not all(isinstance(s, str) for s in lines):
            raise InputError("text: expected a file path or a list of strings")
        where = "text"
    lines = [s for s in lines if s.strip()]
    if not lines:
        raise InputError(f"{where}: no text (empty, or blank lines only)")
    return lines


def probe_model(model: str | PathLike, text: str | PathLike | Sequence[str], *, context_length: int | None = None,
                prefixes: bool = False, max_contexts: int | None = None, batch_size: int = 32,
                device: str | torch.device = "cpu", dtype: str = "float64", head_bias: str = "refuse",
                max_seconds: float | None = None, progress: bool = True,
                report: Callable[[str, ProbeResult], object] | None = None,
                solver_progress: Callable[[int, dict], object] | None = None) -> ProbeResult:
    """:func:`probe` a Hugging Face causal LM saved in the folder ``model`` on ``text`` (a file, one sequence
    per line, or a list of lines).

    The text is tokenized line by line with the model's own tokenizer (its default special tokens); the
    window of the prefixes is the model's ``max_position_embeddings``. H is the input of the LM head
    (:func:`hf_hidden`), W its weight (tied to the input embeddings or not). A head with a bias is refused
    unless ``head_bias="append"`` (h ↦ [h, 1], W ↦ [W, b]: the geometry of a d + 1 dimensional problem). A
    tokenizer with more tokens than the head has rows is refused (it does not belong to this model).
    """
    if head_bias not in ("refuse", "append"):
        raise InputError(f"head_bias: expected 'refuse' or 'append', got {head_bias!r}")
    lines = read_lines(text)
    lm, tokenizer = load_causal_lm(model, device=device, dtype=dtype)
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
    sequences = tokenizer(lines)["input_ids"]
    window = getattr(lm.config, "max_position_embeddings", None) or getattr(lm.config, "n_positions", None)
    labels = tokenizer.convert_ids_to_tokens(list(range(n_tok))) + [f"<row {v}: no token>" for v in range(n_tok, V)]
    inputs = lm.get_input_embeddings()
    meta = {"model": str(model), "architecture": type(lm).__name__, "dtype": dtype, "tokenizer_size": n_tok,
            "tied_head": inputs is not None and inputs.weight is W, "window": window,
            "parameters": sum(p.numel() for p in lm.parameters()), "lines": len(lines)}
    return probe(hf_hidden(lm), W, sequences, context_length=context_length, prefixes=prefixes,
                 window=window, max_contexts=max_contexts, batch_size=batch_size, device=device,
                 bias=bias if head_bias == "append" else None, token_labels=labels, max_seconds=max_seconds,
                 progress=progress, report=report, solver_progress=solver_progress, meta=meta)
