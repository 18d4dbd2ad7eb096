"""Time one SGD step of the feature-collapse network at the paper's size, three ways, in one run.

Size (digest §5.1): K = 1000 classes, L = 15, d = 100, n_w = 1200, batch B = 100, float32, thread
count set explicitly with :func:`embgeo.core.threads.limit_threads` (default 1).

(a) ``embgeo.collapse.train.sgd_step``: the hand-written step (no autograd; weight decay and the
    U update fused into one ``addmm_``).
(b) the plain PyTorch version: ``nn.Embedding`` + ``nn.Linear(bias=False)``, ``F.cross_entropy``,
    ``loss.backward()`` and ``torch.optim.SGD`` with two parameter groups (as the notebooks).
(c) the BLAS bound: only the three GEMMs of a step, X Uᵀ (B×Ld·Ld×K), Gᵀ X (K×B·B×Ld) and
    G U (B×K·K×Ld), on preallocated outputs.

Each is the median over ``--repeats`` blocks of ``--steps`` steps after a warm-up; the ratios
(b)/(a) and (a)/(c) are printed, and the wall-clock of the paper's runs (Fig. 3, 4a, 4b, 4c;
steps from digest §5.1) is estimated from (a) (and the LayerNorm step for 4c).

Run::

    /work/venv/bin/python benchmarks/bench_collapse_step.py                # 1 thread
    /work/venv/bin/python benchmarks/bench_collapse_step.py --threads 2 --repeats 9
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from embgeo.collapse.model import CollapseNet
from embgeo.collapse.train import sgd_step
from embgeo.core.threads import limit_threads

K, L, D, NW, B = 1000, 15, 100, 1200, 100
LR, WD = 0.1, 1e-3
FIGURES = {"Fig. 3 (h, uniform, 1200 ep.)": (60_000, False), "Fig. 4a (h, Zipf n_spl=500, 10 ep.)": (50_000, False),
           "Fig. 4b (h, Zipf n_spl=5, 3000 ep.)": (150_000, False),
           "Fig. 4c (h*, Zipf n_spl=5, 500 ep.)": (25_000, True)}


def _median_time(fn, steps: int, repeats: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        times.append((time.perf_counter() - t0) / steps)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20, help="steps per timed block")
    ap.add_argument("--repeats", type=int, default=7, help="timed blocks (the median is reported)")
    ap.add_argument("--warmup", type=int, default=10)
    args = ap.parse_args()

    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randint(0, NW, (B, L), generator=gen), torch.randint(0, K, (B,), generator=gen))
               for _ in range(16)]
    it = {"a": 0, "ln": 0, "b": 0}

    def nxt(key):
        it[key] = (it[key] + 1) % len(batches)
        return batches[it[key]]

    with limit_threads(args.threads):
        # (a) ours
        model = CollapseNet(NW, D, L, K, seed=0)
        model_ln = CollapseNet(NW, D, L, K, layernorm=True, seed=0)

        def step_a():
            x, y = nxt("a")
            sgd_step(model, x, y, LR, WD, WD)

        def step_ln():
            x, y = nxt("ln")
            sgd_step(model_ln, x, y, LR, 0.0, WD)

        # (b) plain PyTorch
        emb = nn.Embedding(NW, D)
        lin = nn.Linear(L * D, K, bias=False)
        with torch.no_grad():
            emb.weight.mul_(1e-3)
            lin.weight.mul_(1e-3)
        opt = torch.optim.SGD([{"params": emb.parameters(), "weight_decay": WD},
                               {"params": lin.parameters(), "weight_decay": WD}], lr=LR)

        def step_b():
            x, y = nxt("b")
            loss = nn.functional.cross_entropy(lin(emb(x).reshape(B, L * D)), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        # (c) the three GEMMs
        X = torch.randn(B, L * D)
        U = torch.randn(K, L * D)
        G = torch.randn(B, K)
        o1, o2, o3 = torch.empty(B, K), torch.empty(K, L * D), torch.empty(B, L * D)

        def step_c():
            torch.mm(X, U.t(), out=o1)
            torch.mm(G.t(), X, out=o2)
            torch.mm(G, U, out=o3)

        kw = {"steps": args.steps, "repeats": args.repeats, "warmup": args.warmup}
        ta = _median_time(step_a, **kw)
        tb = _median_time(step_b, **kw)
        tc = _median_time(step_c, **kw)
        tln = _median_time(step_ln, **kw)

    print(f"feature-collapse SGD step: K={K}, L={L}, d={D}, n_w={NW}, B={B}, float32, threads={args.threads} "
          f"(torch {torch.__version__}); median of {args.repeats} x {args.steps} steps")
    print(f"  (a) embgeo sgd_step (h)            {ta * 1e3:8.2f} ms/step")
    print(f"      embgeo sgd_step (h*, LayerNorm) {tln * 1e3:7.2f} ms/step")
    print(f"  (b) nn.Embedding+Linear+optim.SGD   {tb * 1e3:7.2f} ms/step")
    print(f"  (c) three GEMMs (BLAS bound)        {tc * 1e3:7.2f} ms/step")
    print(f"  (b)/(a) = {tb / ta:.2f}   (a)/(c) = {ta / tc:.2f}")
    print("estimated wall-clock with (a) (training steps only):")
    for name, (steps, ln) in FIGURES.items():
        t = steps * (tln if ln else ta)
        print(f"  {name:38s} {steps:7d} steps  {t / 60:6.1f} min")
    total = sum(steps * (tln if ln else ta) for steps, ln in FIGURES.values())
    print(f"  {'all four':38s} {sum(s for s, _ in FIGURES.values()):7d} steps  {total / 60:6.1f} min")


if __name__ == "__main__":
    main()
