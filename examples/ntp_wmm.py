"""W*, F and W^mm of a small next-token-prediction instance, each with its certificate.

The NTP implicit-bias paper (Thrampoulidis, NeurIPS 2024) predicts that gradient descent on the
cross-entropy of a linear decoder W over fixed context embeddings splits into two parts: its component in
the data subspace F (eq. 5) converges to W*, the solution of the log-odds equations (4) inside F (Def. 1),
while its component in F⊥ grows without bound in the direction of W^mm, the NTP-SVM solution (Def. 3).
This script computes those objects on a synthetic instance of the paper's Fig. 3-4 data model, prints the
certificates that come with them, and checks Prop. 1: CE(W* + γ W^mm) → 𝓗 as γ grows.

Run:  python examples/ntp_wmm.py            (about 2 s on one core)
"""

import numpy as np

from embgeo.ntp import entropy, is_compatible, is_separable, kl_gap, ntp_margin, ntp_svm, synthetic
from embgeo.ntp.theory import subspace

# m = 10 contexts in d = 12 dimensions (d > m, so Lemma 1 makes the data separable), V = 6 tokens,
# every context followed by 3 of them with Dirichlet(1) probabilities.
data = synthetic(m=10, V=6, d=12, support_size=3, seed=0)
print(f"data: m = {data.m} contexts, V = {data.V} tokens, d = {data.d}, supports of size 3")
print(f"entropy H = {entropy(data):.6f} nats (the lower bound of the loss)")

F = subspace(data)  # eq. (5): span{(e_z - e_z') h_j^T : z, z' in S_j}
print(f"dim F = {F.dim} (of V*d = {data.V * data.d})")

comp = is_compatible(data)  # Def. 1: do the log-odds equations (4) have a solution?
W_star = comp.W
print(f"compatible: {bool(comp)} (residual of eqs. (4): {comp.residual:.1e}, method: {comp.method})")
print(f"||W*|| = {np.linalg.norm(W_star):.6f}")
print(f"||W* - P_F(W*)|| = {np.linalg.norm(W_star - F.project(W_star)):.1e} (W* lies in F)")

sep = is_separable(data)  # Def. 2, with a certificate (a separating W, or a Farkas matrix)
print(f"NTP-separable: {bool(sep)} ({sep.method})")

svm = ntp_svm(data, separability=sep)  # Def. 3: W^mm = argmin ||W|| s.t. (6a), (6b)
gap, bound = svm.residuals["duality_gap"], svm.residuals["error_bound"]
print(f"NTP-SVM: status {svm.status}, relative duality gap {gap:.1e}, "
      f"certified ||W - W^mm||/||W^mm|| <= {bound:.1e}")
print(f"||W^mm|| = {np.linalg.norm(svm.W):.6f}")
print(f"NTP-margin of W^mm = {ntp_margin(data, svm.W):.6f} (= 1/||W^mm||: {1 / np.linalg.norm(svm.W):.6f})")
cos = float(np.sum(W_star * svm.W) / (np.linalg.norm(W_star) * np.linalg.norm(svm.W)))
print(f"cos(W*, W^mm) = {cos:.1e} (W^mm lies in F-perp)")

print("Prop. 1: the loss gap CE - H of W* + gamma W^mm")
for gamma in (0, 5, 10, 20, 40):
    print(f"  gamma = {gamma:>2}: CE - H = {kl_gap(data, W_star + gamma * svm.W):.3e}")
