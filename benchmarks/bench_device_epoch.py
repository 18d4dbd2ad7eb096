"""One paper-scale training epoch of each paper's trainer, on every device this machine has.

The trainers take ``device=`` ("cpu" by default; ``embgeo run NAME --set device=cuda``). This times one epoch
at the paper presets' sizes on the CPU and, where torch sees a GPU, on CUDA, in the dtype each experiment
uses (float64 for the NTP models, float32 for the collapse net and for attention):

* ntp-real-transformer / ntp-real-ufm, paper preset: 2000 tweets, k = 2, V = 1001 (m = 15,014 contexts),
  d = 128; one epoch = one full-batch Adam step over every context (``train_learned``);
* collapse-uniform, paper preset (Fig. 3's h): 3 concepts × 400 words, L = 15, K = 1000, n_spl = 5
  (5000 sentences), d = 100; one epoch = 50 SGD steps of 100 (``collapse.train.train``);
* attention-synthetic, paper preset: 80,000 K-level sequences of T = 256, d = 2048, float32; one epoch = 625
  AdamW steps of 128 (``attention.train.train_adamw``); ``--no-attention`` skips it (about a minute on CPU).

An epoch's time is T(2 epochs) − T(1 epoch): runs that differ by one epoch and record at the same steps
(the first and the last), so recording and set-up cancel; after one warm-up run, each is the best of two.
One thread; the CPU load is printed (on a shared machine the numbers move with it).

    python benchmarks/bench_device_epoch.py
"""

import argparse
import os
import time

from bench_threads import blas_threads, limit_threads, set_thread_env  # beside this script: on sys.path as its folder


def _timed(fn) -> float:
    import torch

    t0 = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def ntp_cases():
    from embgeo.ntp.corpus import build_corpus, tweet_lines
    from embgeo.ntp.training.learned import UFM, TransformerModel, train_learned

    corpus = build_corpus(tweet_lines()[:2000], context_length=2, max_vocab=1000)
    data = corpus.data

    def transformer(device, epochs):
        model = TransformerModel(data.V, d=128, layers=2, heads=4, k=2, seed=0)
        train_learned(model, data, corpus.contexts, optimizer="adam", lr=3e-3, steps=epochs, record_every=10**6,
                      progress=False, device=device)

    def ufm(device, epochs):
        model = UFM(data.m, data.V, 128, seed=0)
        train_learned(model, data, optimizer="adam", lr=3e-3, steps=epochs, record_every=10**6, progress=False,
                      device=device)

    size = f"m = {data.m}, V = {data.V}, d = 128"
    return [("ntp-real-transformer (1 full-batch step)", size, transformer), ("ntp-real-ufm (1 full-batch step)",
                                                                            size, ufm)]


def collapse_case():
    from embgeo.collapse.data import generate
    from embgeo.collapse.model import CollapseNet
    from embgeo.collapse.train import train

    data = generate(3, 400, 15, 1000, n_train_per_class=5, n_test_per_class=5, latent="random", seed=0)

    def run(device, epochs):
        model = CollapseNet(data.n_words, 100, data.length, data.n_classes, seed=0)  # float32, as the experiment
        train(model, data, epochs, log_every=10**6, progress=False, device=device)

    return ("collapse-uniform h (50 SGD steps)", f"{len(data.train_y)} sentences, L = 15, K = 1000, d = 100, float32",
            run)


def attention_case():
    import torch

    from embgeo.attention.data import synthetic_levels
    from embgeo.attention.model import OneLayerAttention
    from embgeo.attention.train import train_adamw

    data = synthetic_levels(80000, seed=0, T=256, n_irrelevant=964)

    def run(device, epochs):
        model = OneLayerAttention(int(data.levels.size), 2048, seed=0, train_v=True, dtype=torch.float32)
        train_adamw(model, data.X, data.y, epochs, lr=1e-4, weight_decay=1e-4, batch_size=128, log_every=10**6,
                    progress=False, device=device)

    return ("attention-synthetic (625 AdamW steps)", "n = 80,000, T = 256, d = 2048, float32", run)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-attention", action="store_true", help="skip the attention epoch")
    args = ap.parse_args()
    import torch

    limit_threads(1)
    torch.set_num_threads(1)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    gpu = (f"CUDA: {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else
           f"no CUDA device on this machine (torch {torch.__version__}"
           + (", built without CUDA" if not torch.version.cuda else "") + "): the GPU column is not measured")
    print(f"devices: {', '.join(devices)}; {gpu}; {blas_threads()}, torch threads {torch.get_num_threads()}; "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    cases = ntp_cases() + [collapse_case()] + ([] if args.no_attention else [attention_case()])
    print(f"{'trainer, one epoch':<42} {'size':<48} " + " ".join(f"{d:>10}" for d in devices), flush=True)
    for name, size, run in cases:
        times = []
        for device in devices:
            run(device, 1)  # warm-up: first-use costs (kernels, optimizer set-up) are not an epoch's
            one = min(_timed(lambda: run(device, 1)) for _ in range(2))  # noqa: B023
            two = min(_timed(lambda: run(device, 2)) for _ in range(2))  # noqa: B023
            times.append(f"{two - one:9.2f}s")
        print(f"{name:<42} {size:<48} " + " ".join(times) + f"   (load {os.getloadavg()[0]:.2f})", flush=True)


if __name__ == "__main__":
    set_thread_env(1)
    main()
