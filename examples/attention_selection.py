"""The max-margin token selection of a small one-layer attention instance.

Attention with trained embeddings (Wu, Shevchenko, Oymak, Mondelli), Sec. 4: on data where every sequence
holds one important token (completely positive or negative) among irrelevant ones (Assumption 1), one
gradient step on the embeddings (eq. 4) aligns each E_s with the value head v in proportion to its signed
frequency α_s (Lemma 4.1); gradient descent on the ⟨cls⟩ query p with E = E¹ frozen then converges in
direction to p̂, the solution of the max-margin problem (12) for the selection of the important tokens
(Theorem 4.3).

This script draws such data, takes the first step, solves (12) exactly with its KKT certificate
(:func:`embgeo.attention.theory.max_margin_selection`), runs gradient descent on p and reports how its
direction approaches p̂ and which tokens it selects.

Run:  python examples/attention_selection.py     (about 5 s on one core)
"""

import numpy as np

from embgeo.attention.data import assumption1_data
from embgeo.attention.model import OneLayerAttention
from embgeo.attention.theory import max_margin_selection, selection
from embgeo.attention.train import embedding_update, two_stage

n_pairs, T, n_irrelevant, d, eta0, seed = 6, 5, 6, 256, 1000.0, 0
data = assumption1_data(n_pairs, T, seed=seed, n_irrelevant=n_irrelevant, n_positive=n_pairs, n_negative=n_pairs)
V = n_irrelevant + 2 * n_pairs
important_ids = set(data.important.tolist())
important = [[int(s) for s in row if s in important_ids] for row in data.X]
n = len(data.X)
print(f"data: n = {n} sequences of T = {T} tokens, {n_irrelevant} irrelevant and {2 * n_pairs} important "
      f"token types (Assumption 1), d = {d}")

model = OneLayerAttention(V, d, seed=seed)  # E0, p0 ~ N(0, I/d), unit v fixed
dE, _ = embedding_update(model, data.X, data.y, eta0)  # eq. (4): one GD step of size eta0, model unchanged
E1 = model.E.detach().numpy() + dE

mm = max_margin_selection(E1, data.X, important)  # problem (12) for the important-only selection
print(f"max-margin problem (12): status {mm.status}, {len(mm.pairs)} distinct constraints "
      f"({mm.n_raw} before deduplication), {len(mm.active)} active")
print(f"||p_hat|| = {mm.norm:.6f}, margin 1/||p_hat|| = {mm.margin:.6f}")
print(f"certificate: min margin {mm.min_margin:.9f} (>= 1), stationarity {mm.stationarity:.1e}, "
      f"relative duality gap {mm.gap:.1e}")

steps = 3000
trace = two_stage(model, data.X, data.y, eta0, steps, lr=1.0, p_hat=mm.p, record_every=300)
df = trace.to_frame()
print("gradient descent on p with E = E1 frozen (Theorem 4.3):")
for row in df.itertuples():
    print(f"  step {int(row.step):>5}: loss {row.loss:.3e}, ||p_t|| {row.norm_p:7.3f}, "
          f"cos(p_t, p_hat) {row.cos_p_hat:.6f}")
chosen = selection(E1, data.X, model.p.detach().double().numpy())
share = np.mean([set(i) == s for i, s in zip(important, chosen, strict=True)])
print(f"sequences whose selection S_X(p_T) is exactly their important token: {share:.0%}")
