"""Claims: one checked statement of a paper, its value measured by a run, and the verdict.

A :class:`Claim` puts the paper's printed value, the theory's prediction and the measured value side by side
with the tolerance it was held to and the verdict. Experiments build claims with the helpers here
(:func:`close`, :func:`at_least`, :func:`at_most`, :func:`banded`, :func:`significant`, :func:`holds`,
:func:`as_check`); the runner, the report, the CLI and sweeps pass the objects along, and only the files
(``claims.json``, the run store) hold them as dicts (:meth:`Claim.to_dict`, :meth:`Claim.from_dict`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

#: The three verdicts of a claim, from its ``ok``: True, False, None.
VERDICTS = {True: "holds", False: "fails", None: "undecided"}
#: The state of a claim whose premise does not hold in the run (:func:`not_applicable`): neither held nor failed.
NOT_APPLICABLE = "not applicable"


@dataclass(frozen=True)
class SeedStats:
    """A claim over several seeds (``reproduce --seeds N``): how many seeds ran it, how many held it, how many
    left it undecided, each seed's measured value, and (numbers only) their mean and sample standard deviation;
    ``not_applicable``: in how many of the n seeds its premise failed (they are left out of the verdict)."""

    n: int
    holds: int
    undecided: int
    values: list
    mean: float | None = None
    std: float | None = None
    not_applicable: int = 0

    def to_dict(self) -> dict:
        out = {"n": self.n, "holds": self.holds, "undecided": self.undecided, "values": jsonable(self.values)}
        if self.mean is not None:
            out.update(mean=self.mean, std=self.std)
        if self.not_applicable:
            out["not_applicable"] = self.not_applicable
        return out

    @classmethod
    def from_dict(cls, d: dict) -> SeedStats:
        return cls(d["n"], d["holds"], d.get("undecided", 0), list(d.get("values", [])), d.get("mean"), d.get("std"),
                   d.get("not_applicable", 0))


@dataclass
class Claim:
    """One checked statement: ``ok`` says whether ``measured`` agrees with the paper/theory.

    ``ok`` is True (holds), False (fails) or None (undecided: the measured value is only known within a
    certified band — a solver's error bound, a binomial interval, a spread over seeds — and the band
    straddles the level, so the run cannot say; see :func:`banded`). Undecided claims are counted apart,
    never as holding or failing.

    ``tolerance`` documents where the bound comes from (the paper's printed precision, a spread
    over seeds, or the statement's own inequality); ``note`` explains a failure or a reading.

    ``paper`` is shown only beside a run of the paper's configuration: the runner moves it into the
    note otherwise (:func:`embgeo.lab.runner.paper_column`), unless ``any_scale`` says the
    printed value does not depend on the settings a scale or ``--set`` changes (e.g. the entropy of
    the paper's data generator). ``any_scale`` is an instruction to the runner, not stored.

    ``check`` marks a **consistency check**: a statement that holds by construction of the code or of the
    chosen data (an identity of the solvers' output, a setting read back), so it cannot fail if the paper
    were wrong. It stays in the tables — a failing check is a bug — but is counted apart from the claims
    (:func:`counted`, :func:`as_check`).

    ``source`` names whose statement a claim is when it is **not the paper's** — the toolkit's own (a training gate)
    or another paper's ("Zhao et al. 2024"): it keeps its verdict and is shown, but is counted apart from the paper's
    claims (:func:`others_statement`, :func:`counted`). Empty: the paper's own statement.

    ``reference`` is a number from elsewhere than the paper's text — the authors' notebook or a re-run of their code
    — shown in its own column with ``reference_source`` naming it ("the authors' runs"): the ``paper`` column holds
    only numbers the paper prints.

    ``applicable`` False marks a claim whose **premise fails** in this run (e.g. Theorem 2's limit where the data are
    certified not NTP-separable): its state is "not applicable", neither held nor failed, counted apart like the
    checks, and ``premise`` says which premise failed and with what certificate (:func:`not_applicable`).

    ``seeds`` is set on a claim aggregated over seeds (:func:`aggregate_claims`): ``measured`` is then the mean.
    """

    name: str
    measured: Any
    ok: bool | None
    paper: Any = None
    theory: Any = None
    tolerance: Any = None
    note: str = ""
    any_scale: bool = False
    check: bool = False
    seeds: SeedStats | None = None
    applicable: bool = True
    premise: str = ""
    reference: Any = None
    reference_source: str = ""
    source: str = ""

    def to_dict(self) -> dict:
        """The claim as ``claims.json`` stores it (non-finite floats as strings; ``seeds`` only when set)."""
        out = {k: jsonable(v) for k, v in dataclasses.asdict(self).items()
               if k not in ("any_scale", "seeds", "applicable", "premise", "reference", "reference_source", "source")}
        if not self.applicable:  # only where it matters: older files and most claims have neither key
            out.update(applicable=False, premise=self.premise)
        if self.reference is not None:
            out.update(reference=jsonable(self.reference), reference_source=self.reference_source)
        if self.source:
            out["source"] = self.source
        if self.seeds is not None:
            out["seeds"] = self.seeds.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: dict) -> Claim:
        """A claim read back from ``claims.json`` or the run store (records written before consistency checks
        existed have no ``check``: they are claims)."""
        seeds = d.get("seeds")
        return cls(d["name"], d.get("measured"), d.get("ok"), d.get("paper"), d.get("theory"), d.get("tolerance"),
                   d.get("note", "") or "", check=bool(d.get("check", False)),
                   seeds=SeedStats.from_dict(seeds) if seeds else None, applicable=bool(d.get("applicable", True)),
                   premise=d.get("premise", "") or "", reference=d.get("reference"),
                   reference_source=d.get("reference_source", "") or "", source=d.get("source", "") or "")

    @property
    def verdict(self) -> str:
        """"holds", "fails", "undecided" or "not applicable"."""
        return verdict(self)


def jsonable(value):
    """``value`` as JSON can hold it: numpy scalars as Python numbers, non-finite floats as strings ("nan",
    "inf"), tuples as lists (recursively)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def as_check(claim: Claim, why: str) -> Claim:
    """``claim`` as a consistency check (counted apart), its note saying ``why`` it cannot fail."""
    note = f"consistency check, not counted: {why}" + (f"; {claim.note}" if claim.note else "")
    return dataclasses.replace(claim, check=True, note=note)


def not_applicable(claim: Claim, premise: str) -> Claim:
    """``claim`` in the state "not applicable": the statement's ``premise`` fails in this run (say which, and with what
    certificate). Its measured value stays for the reader; it is neither held nor failed, and counted apart."""
    if claim.check:
        raise ValueError(f"not_applicable({claim.name!r}): a consistency check has no premise to fail")
    if not premise:
        raise ValueError(f"not_applicable({claim.name!r}): say which premise fails")
    return dataclasses.replace(claim, applicable=False, premise=premise)


def with_reference(claim: Claim, value: Any, source: str) -> Claim:
    """``claim`` with a number from outside the paper's text (``source``: e.g. "the authors' runs") in its own
    column; the paper column keeps only what the paper prints."""
    if not source:
        raise ValueError(f"with_reference({claim.name!r}): name where the number comes from")
    return dataclasses.replace(claim, reference=value, reference_source=source)


def others_statement(claim: Claim, source: str) -> Claim:
    """``claim`` as a statement that is not the paper's: ``source`` says whose ("the toolkit's own training gate",
    "Zhao et al. 2024"). Shown with its verdict, counted apart from the paper's claims."""
    if not source:
        raise ValueError(f"others_statement({claim.name!r}): say whose statement it is")
    return dataclasses.replace(claim, source=source)


def others(claims: Iterable[Claim]) -> list[Claim]:
    """The statements that are not the paper's (:func:`others_statement`), checks and not-applicable ones aside."""
    return [c for c in claims if c.source and not c.check and c.applicable]


def counts(claim: Claim) -> bool:
    """Whether ``claim`` counts as the paper's: not a consistency check, its premise holding (applicable), and the
    paper's own statement (no :func:`others_statement` source)."""
    return not claim.check and claim.applicable and not claim.source


def counted(claims: Iterable[Claim]) -> list[Claim]:
    """The claims that count as the paper's (:func:`counts`)."""
    return [c for c in claims if counts(c)]


def verdict(claim: Claim) -> str:
    """"holds", "fails" or "undecided" for a claim (``ok`` True / False / None); "not applicable" where its premise
    fails (:func:`not_applicable`), whatever ``ok`` is."""
    if not claim.applicable:
        return NOT_APPLICABLE
    return VERDICTS[None if claim.ok is None else bool(claim.ok)]


def tally(claims: Iterable[Claim]) -> dict:
    """{"holds": n, "fails": n, "undecided": n} over the counted claims, {"not applicable": n} over the claims whose
    premise fails, {"others": n, "others holding": n} over the statements that are not the paper's, and
    {"checks": n, "checks failing": n} over the consistency checks."""
    claims = list(claims)
    out = dict.fromkeys(VERDICTS.values(), 0)
    for c in counted(claims):
        out[verdict(c)] += 1
    out[NOT_APPLICABLE] = sum(not c.applicable for c in claims)
    theirs = others(claims)
    out["others"] = len(theirs)
    out["others holding"] = sum(verdict(c) == "holds" for c in theirs)
    checks = [c for c in claims if c.check]
    out["checks"] = len(checks)
    out["checks failing"] = sum(verdict(c) != "holds" for c in checks)
    return out


def banded(name: str, measured: float, band: float, level: float, *, above: bool = True, paper: Any = None,
           theory: Any = None, note: str = "", band_source: str = "the certified band") -> Claim:
    """Claim ``measured ≥ level`` (``above``) or ``≤ level`` for a value known only within ± ``band``.

    Holds when the whole interval [measured − band, measured + band] is on the claimed side, fails when it
    is entirely on the other side, and is undecided (``ok`` None) when it straddles the level. A NaN
    measured value or band fails (nothing was measured); ``band`` must be ≥ 0 (inf: always undecided
    for a finite value). ``band_source`` names where the band comes from, for the tolerance column.
    """
    measured, band = float(measured), float(band)
    if band < 0:
        raise ValueError(f"banded({name!r}): the band must be >= 0, got {band}")
    if not (math.isfinite(measured) and not math.isnan(band)):
        ok: bool | None = False
    else:
        lo, hi = measured - band, measured + band
        ok = (lo >= level) if above else (hi <= level)
        if not ok and ((hi >= level) if above else (lo <= level)):
            ok = None  # the band straddles the level
    op = ">=" if above else "<="
    return Claim(name, measured, ok, paper, theory, f"{op} {level:g}, decided outside ± {band:.2g} ({band_source})",
                 note)


def close(name: str, measured: float, target: float, tol: float, *, paper: Any = None, theory: Any = None,
          note: str = "", relative: bool = False, any_scale: bool = False) -> Claim:
    """Claim ``|measured - target| <= tol`` (``tol`` relative to ``|target|`` if ``relative``).

    A NaN or infinite ``measured`` (or ``target``) fails; ``tol`` must be finite and ≥ 0.
    """
    if not (math.isfinite(tol) and tol >= 0):
        raise ValueError(f"close({name!r}): tolerance must be finite and >= 0, got {tol}")
    bound = tol * abs(target) if relative else tol
    ok = bool(math.isfinite(measured) and math.isfinite(target) and abs(measured - target) <= bound)
    tol_text = f"±{tol:g}" + (" (relative)" if relative else "")
    return Claim(name, float(measured), ok, paper, theory, tol_text, note, any_scale)


def at_least(name: str, measured: float, bound: float, *, paper: Any = None, theory: Any = None, note: str = "",
             any_scale: bool = False) -> Claim:
    """Claim ``measured >= bound`` (a NaN fails)."""
    return Claim(name, float(measured), bool(measured >= bound), paper, theory, f">= {bound:g}", note, any_scale)


def at_most(name: str, measured: float, bound: float, *, paper: Any = None, theory: Any = None, note: str = "",
            any_scale: bool = False) -> Claim:
    """Claim ``measured <= bound`` (a NaN fails)."""
    return Claim(name, float(measured), bool(measured <= bound), paper, theory, f"<= {bound:g}", note, any_scale)


def significant(name: str, p_value: float, level: float, *, note: str = "") -> Claim:
    """Claim a test's ``p_value`` ≤ ``level``; measured is the p-value and the tolerance says so.

    A p-value that underflowed to 0 is recorded as the smallest positive float with the fact in the
    note, so the report never prints a bare 0.
    """
    p = float(p_value)
    if p == 0.0:
        p = float(np.finfo(float).tiny)
        note = (f"{note}; " if note else "") + f"p-value underflowed: p < {p:.3g}"
    return Claim(name, p, bool(p <= level), None, None, f"p-value <= {level:g}", note)


def holds(name: str, measured: Any, ok: bool, *, paper: Any = None, theory: Any = None, note: str = "",
          any_scale: bool = False) -> Claim:
    """A claim whose verdict is a yes/no statement (e.g. equal rows, every run qualifies)."""
    return Claim(name, measured, bool(ok), paper, theory, "exact statement", note, any_scale)


def aggregate_claims(per_seed: list[list[Claim]]) -> list[Claim]:
    """One claim per name over the seeds' claim lists: ``measured`` the mean (numbers) and ``seeds`` the
    counts (:class:`SeedStats`); ``ok`` only if it holds in every seed.

    The spread is the sample standard deviation over seeds (0 for one seed). A non-numeric measured
    value (a statement, a list) keeps the first seed's value; the verdict count is what it reports.
    Holds only if it holds in every seed; fails if it fails in one; else (some undecided) undecided. Seeds in which
    the claim's premise fails (:func:`not_applicable`) are left out of the verdict and the mean, and counted; a claim
    not applicable in every seed stays not applicable.
    """
    order: dict[str, list[Claim]] = {}
    for claims in per_seed:
        for c in claims:
            order.setdefault(c.name, []).append(c)
    out = []
    for every in order.values():
        cs = [c for c in every if c.applicable]
        if not cs:
            out.append(dataclasses.replace(every[0], seeds=SeedStats(len(every), 0, 0, [c.measured for c in every],
                                                                     not_applicable=len(every))))
            continue
        values = [c.measured for c in cs]
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        held = sum(c.ok is True for c in cs)
        undecided = sum(c.ok is None for c in cs)
        mean = std = None
        measured = cs[0].measured
        if numeric:
            arr = [float(v) for v in values]
            mean = sum(arr) / len(arr)
            std = (sum((v - mean) ** 2 for v in arr) / (len(arr) - 1)) ** 0.5 if len(arr) > 1 else 0.0
            measured = mean
        failed = len(cs) - held - undecided
        ok = True if held == len(cs) else (False if failed else None)
        out.append(dataclasses.replace(cs[0], measured=measured, ok=ok,
                                       seeds=SeedStats(len(every), held, undecided, values, mean, std,
                                                       len(every) - len(cs))))
    return out
