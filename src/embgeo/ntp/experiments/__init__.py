"""The NTP paper's experiments, registered with the lab as :data:`PAPER` (entry point ``embgeo.papers: ntp``),
with the paper's own commands ``embgeo ntp analyze`` and ``embgeo ntp probe`` (:func:`embgeo.ntp.cli.add_commands`).

:mod:`~embgeo.ntp.experiments.paper`: the paper's figures, remarks and Lemma 1 (with the calibration data of
Thm. 2's levels, ``ntp_levels.csv``); :mod:`~embgeo.ntp.experiments.separability`: where NTP-separability sets in
(Remark 1), a sweep; :mod:`~embgeo.ntp.experiments.real`: learned embeddings on real text;
:mod:`~embgeo.ntp.experiments.real_lm`: a pretrained LM's own embeddings (the user's checkpoint).
"""

from embgeo.lab.registry import Paper
from embgeo.ntp.cli import add_commands
from embgeo.ntp.experiments import paper, real, real_lm, separability

PAPER = Paper(
    name="ntp",
    title="Implicit Optimization Bias of Next-Token Prediction in Linear Models",
    citation="C. Thrampoulidis, NeurIPS 2024",
    order=1,
    experiments=(*paper.EXPERIMENTS, *separability.EXPERIMENTS, *real.EXPERIMENTS, *real_lm.EXPERIMENTS),
    commands=add_commands,  # embgeo ntp analyze / embgeo ntp probe
)

__all__ = ["PAPER"]
