"""AdamW steps of the attention models on the tweets at the paper presets' size, padded and cut.

``attention-reviews`` and ``attention-two-layer`` at paper scale train on the 23,139 tweets (813 WordPiece tokens,
no truncation: the longest tweet has 85 tokens, the median 8) with d = 2048, float32, minibatches of 128, 500
epochs of 181 steps. ``train_adamw`` cuts each minibatch to its longest sequence and computes the two-layer
model's in four parts of similar length (:func:`embgeo.attention.train.minibatch_loss`). The reference is the
step as it was before: the minibatch padded to the corpus' longest tweet, in one part. Each way runs the same
``--steps`` minibatches of one seeded permutation from the same initial weights, after two warm-up steps; the
first step's loss of every way is printed beside the reference's (the same up to rounding), and an epoch's time
is the mean step × 181. One thread.

    python benchmarks/bench_attention_text.py [--steps 20] [--dim 2048]
"""

import argparse
import os
import time

from bench_threads import limit_threads, set_thread_env  # beside this script: on sys.path as its folder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20, help="minibatches timed per way (default 20)")
    ap.add_argument("--dim", type=int, default=2048, help="embedding dimension (default 2048, the paper preset's)")
    args = ap.parse_args()
    set_thread_env(1)
    import numpy as np
    import torch

    limit_threads(1)
    torch.set_num_threads(1)

    from embgeo.attention.experiments import ReviewsConfig, _load_corpus
    from embgeo.attention.model import OneLayerAttention, TwoLayerAttention
    from embgeo.attention.train import minibatch_loss

    corpus, _ = _load_corpus(ReviewsConfig(n=0, max_length=0, dim=args.dim))
    X = torch.as_tensor(np.asarray(corpus.X))
    y = torch.as_tensor(np.asarray(corpus.y), dtype=torch.float32)
    lengths = (X != corpus.pad_id).sum(1).numpy()
    print(f"tweets: N = {len(X)}, V = {len(corpus.vocab)}, padded to T = {X.shape[1]}, median length "
          f"{np.median(lengths):.0f}; d = {args.dim}, float32, minibatch 128, one thread; "
          f"load {os.getloadavg()[0]:.1f}")
    perm = torch.randperm(len(X), generator=torch.Generator().manual_seed(0))
    batches = [perm[i * 128:(i + 1) * 128] for i in range(args.steps + 2)]
    pad = corpus.pad_id

    def run(cls, loss_of):
        model = cls(len(corpus.vocab), args.dim, seed=0, train_v=True, dtype=torch.float32)
        opt = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=1e-2, weight_decay=1e-8)
        first, t0 = None, 0.0
        for i, idx in enumerate(batches):
            if i == 2:
                t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = loss_of(model, X[idx], y[idx])
            loss.backward()
            opt.step()
            first = float(loss.detach()) if first is None else first
        return (time.perf_counter() - t0) / args.steps, first

    ways = [("padded to the longest tweet, one part (reference)", lambda m, xb, yb: m.loss(xb, yb, pad_id=pad)),
            ("cut to the minibatch's longest, one part", lambda m, xb, yb: minibatch_loss(m, xb, yb, pad, 1)),
            ("cut, four parts of similar length", lambda m, xb, yb: minibatch_loss(m, xb, yb, pad, 4))]
    print(f"{'model':<10} {'way':<52} {'ms/step':>8} {'s/epoch':>8} {'× ref':>6}  first loss")
    for name, cls in (("one-layer", OneLayerAttention), ("two-layer", TwoLayerAttention)):
        ref = None
        for way, fn in ways:
            step, first = run(cls, fn)
            ref = ref or step
            print(f"{name:<10} {way:<52} {1e3 * step:8.1f} {181 * step:8.1f} {step / ref:6.2f}  {first:.7f}",
                  flush=True)


if __name__ == "__main__":
    main()
