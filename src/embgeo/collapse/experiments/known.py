"""What the investigations found about the presets' failing claims (``known_results.json``, README): shown beside
a claim only when the run is exactly that preset."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from embgeo.lab.registry import get

# -- what is known about the presets' failing claims (investigations; README) ----------------------

#: The investigations' findings (why a claim fails at a registered preset), kept as data beside this module.
KNOWN_RESULTS = Path(__file__).parent.parent / "known_results.json"


@functools.cache
def known_results() -> dict[tuple[str, str, str], str]:
    """(experiment, scale, claim key) → why that claim fails at that preset, read from :data:`KNOWN_RESULTS`
    (found by the runs described in the README). Shown only when the config is exactly that preset
    (:func:`_known`), never beside another configuration."""
    doc = json.loads(KNOWN_RESULTS.read_text(encoding="utf-8"))
    return {(r["experiment"], r["scale"], r["claim"]): r["note"] for r in doc["results"]}


def _preset(name: str, cfg) -> str | None:
    """``"quick"`` or ``"paper"`` when ``cfg`` is exactly that preset of experiment ``name``, else None."""
    for scale in ("quick", "paper"):
        if cfg == get(name).config(scale):
            return scale
    return None


def _known(name: str, cfg, key: str) -> str:
    """The :func:`known_results` note of claim ``key`` of experiment ``name`` if ``cfg`` is one of its presets."""
    return known_results().get((name, _preset(name, cfg), key), "")
