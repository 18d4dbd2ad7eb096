"""The certificates of :func:`~embgeo.ntp.theory.is_compatible` and :func:`~embgeo.ntp.theory.ntp_svm` in words.

``embgeo ntp analyze --out DIR`` writes them as ``certificate.txt`` (the largest entries, one per line: which
contexts and tokens tie or conflict) and ``certificate.json`` (every entry). The entries are those of the
sparse (m, V) matrices the theory returns:

* not compatible (Def. 1): λ_{j,v} on support pairs, balanced per context, Σ_j λ_{j,v} h̄_j ≈ 0 for every
  token v and ⟨λ, log p̂⟩ = −1: the log-odds these (context, token) pairs ask for cannot all hold at once;
* not separable (Def. 2): the Farkas matrix Ψ: −μ_{j,v} ≤ 0 on the (context, token) pairs where v does not
  follow j (the margins that conflict), balanced by entries on the supports (the ties);
* separable: the (context, token ∉ S_j) pairs that are tight at W^mm (margin exactly 1: the support
  vectors), with their dual weights.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

#: Entries per certificate in the text file (all of them are in the JSON file).
TEXT_ENTRIES = 100


def certificates(data, compat, sep, svm, context_text: Callable[[object, int], str]) -> tuple[str, dict]:
    """(text, JSON document) of the compatibility and separability certificates of ``data``.

    ``compat``: a Compatibility or None (undecided); ``sep``: a Separability or None (undecided, or every support
    the whole vocabulary); ``svm``: the NTPSVM when it ran (its support vectors certify separability, with W^mm),
    else None; ``context_text(data, j)`` names context j.
    """
    def token(v: int) -> str:
        return data.token_labels[v] if data.token_labels is not None else str(v)

    def entries(M: sp.spmatrix, extra: Callable[[int, int], dict] | None = None) -> list[dict]:
        coo = sp.coo_matrix(M)
        order = np.argsort(-np.abs(coo.data), kind="stable")
        return [{"context": int(j), "context_text": context_text(data, int(j)), "token": int(v),
                 "token_text": token(int(v)), "weight": float(w), **(extra(int(j), int(v)) if extra else {})}
                for j, v, w in zip(coo.row[order], coo.col[order], coo.data[order], strict=True)]

    support = data.probs

    def flag(j: int, v: int) -> dict:
        return {"in_support": bool(support[j, v] > 0)}

    doc: dict = {}
    lines = ["# Certificates of the NTP analysis (embgeo ntp analyze / ntp probe; paper: NTP implicit bias, Defs. "
             "1-3). Columns: context (its tokens, or its row), token, weight; the largest weights first."]
    if compat is None:
        doc["compatibility"] = {"verdict": "undecided"}
        lines += ["", "## compatibility (Def. 1): undecided (see summary.json)"]
    elif compat:
        doc["compatibility"] = {"verdict": True, "method": compat.method, "residual": compat.residual}
        lines += ["", f"## compatibility (Def. 1): True ({compat.method}): W* (W_star.npy where the dense arrays are "
                      "written) solves the log-odds "
                      f"equations (4) to {compat.residual:.1e}; nothing conflicts"]
    else:
        items = entries(compat.certificate)
        doc["compatibility"] = {"verdict": False, "method": compat.method, "residual_bound": compat.residual,
                                "certificate_norm": compat.certificate_norm, "entries": items}
        lines += ["", f"## compatibility (Def. 1): False ({compat.method})",
                  "# These (context, next token) pairs ask for log-odds that no W gives at once: the weights λ sum "
                  "to 0 in every context,", "# Σ_j λ_(j,v) h_j ≈ 0 for every token v (norm "
                  f"{compat.certificate_norm:.1e}) and Σ λ log p = -1; every W misses (4) by >= {compat.residual:.2e}."]
        lines += _rows(items, ("context", "token", "weight"))
    if sep is None:
        doc["separability"] = {"verdict": "undecided"}
        lines += ["", "## separability (Def. 2): undecided or not applicable (see summary.json)"]
    elif not sep:
        items = entries(sep.certificate, flag) if sep.certificate is not None else entries(-sep.farkas, flag)
        doc["separability"] = {"verdict": False, "method": sep.method, "perp_norm": sep.residuals.get("perp_norm"),
                               "entries": items}
        lines += ["", f"## separability (Def. 2): False ({sep.method})",
                  "# Conflicts: a negative weight -mu on a pair (j, v) where v does NOT follow context j (mu >= 0, "
                  "summing to 1); the positive", "# and negative weights on pairs where v follows j (in_support) "
                  "are ties. Every W that ties the supports gives", "# sum mu_(j,v) * margin_(j,v) ~ 0, so not "
                  f"every margin can be positive (residual {sep.residuals.get('perp_norm', float('nan')):.1e})."]
        lines += _rows(items, ("context", "token", "in_support", "weight"))
    elif svm is None or svm.W is None:  # separable (the model's W or a route certified it); W^mm was not found
        doc["separability"] = {"verdict": True, "method": sep.method, "svm_status": None if svm is None else
                               svm.status, "entries": []}
        lines += ["", f"## separability (Def. 2): True ({sep.method}); W^mm not found (see summary.json), so no "
                      "support vectors to list"]
    else:
        mult = svm.multipliers
        active = svm.active
        weights = (np.asarray(mult[active[:, 0], active[:, 1]]).ravel() if mult is not None and len(active)
                   else np.full(len(active), np.nan))
        items = [{"context": int(j), "context_text": context_text(data, int(j)), "token": int(v),
                  "token_text": token(int(v)), "weight": float(w)} for (j, v), w in zip(active, weights, strict=True)]
        items.sort(key=lambda e: -abs(e["weight"]) if e["weight"] == e["weight"] else 0.0)
        doc["separability"] = {"verdict": True, "method": svm.separability.method, "svm_status": svm.status,
                               "margin": svm.margin, "entries": items}
        lines += ["", f"## separability (Def. 2): True ({svm.separability.method}); W^mm in W_mm.npy where the dense "
                      "arrays are written; NTP-margin "
                      f"{svm.margin:.6g} ({svm.status})",
                  "# The pairs (context j, token v not following j) whose margin is exactly 1 at W^mm (the support "
                  "vectors), with their dual weights mu:"]
        lines += _rows(items, ("context", "token", "weight"))
    return "\n".join(lines) + "\n", doc


def _rows(items: list[dict], columns: tuple[str, ...]) -> list[str]:
    """Tab-separated lines of the first TEXT_ENTRIES items, and how many more the JSON file has."""
    head = "\t".join(columns)
    out = [f"# {head}"]
    for e in items[:TEXT_ENTRIES]:
        cells = {"context": e["context_text"], "token": e["token_text"], "weight": f"{e['weight']:.6g}",
                 "in_support": "yes" if e.get("in_support") else "no"}
        out.append("\t".join(cells[c] for c in columns))
    if len(items) > TEXT_ENTRIES:
        out.append(f"# ... {len(items) - TEXT_ENTRIES} more entries in certificate.json")
    return out
