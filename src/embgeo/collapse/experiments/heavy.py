"""The functions of the collapse experiments that need torch, scipy.stats or the model: imported on first use
(:func:`embgeo.core.lazy.lazy`), so that ``embgeo list``, ``show`` and a refusal import none of them (issues 24, 37)."""

from __future__ import annotations

from embgeo.core.lazy import lazy

# torch and the model built on it are imported by the first run, not by embgeo list / show (issue 24); so are
# the metrics (scipy.stats), and matplotlib.pyplot, pandas and the figures inside the functions that use them:
# every command imports this module, and `embgeo list` or a refusal must not pay for them (issue 37).
CollapseNet = lazy("embgeo.collapse.model", "CollapseNet")
minimize_true_risk = lazy("embgeo.collapse.solvers", "minimize_true_risk")
train = lazy("embgeo.collapse.train", "train")
direction_spread = lazy("embgeo.collapse.metrics", "direction_spread")
equiangular_distance = lazy("embgeo.collapse.metrics", "equiangular_distance")
norm_frequency_correlation = lazy("embgeo.collapse.metrics", "norm_frequency_correlation")
norm_spread = lazy("embgeo.collapse.metrics", "norm_spread")
norm_stats = lazy("embgeo.collapse.metrics", "norm_stats")
pca_singular_values = lazy("embgeo.collapse.metrics", "pca_singular_values")
plane_direction_spread = lazy("embgeo.collapse.metrics", "plane_direction_spread")
sigma_gap = lazy("embgeo.collapse.metrics", "sigma_gap")
type1_distance = lazy("embgeo.collapse.metrics", "type1_distance")
variance_ratio = lazy("embgeo.collapse.metrics", "variance_ratio")
variance_ratio_se = lazy("embgeo.collapse.metrics", "variance_ratio_se")
