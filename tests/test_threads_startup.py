"""Threads and start-up (issue 24): one thread by default in Python too, a warning for more threads than cores,
and the commands that need no training (list, show, every refusal, ntp analyze) never import torch."""

from __future__ import annotations

import subprocess
import sys
import textwrap

EMBGEO = [sys.executable, "-m", "embgeo.cli"]


def test_ntp_training_defaults_to_one_thread_and_restores_torch(monkeypatch):
    """torch alone takes every core (10k GD steps: 131 s with 2 threads on a shared 2-core machine, 8 s with
    one); embgeo's trainers run with one unless told, and torch's own setting comes back afterwards."""
    import torch

    import embgeo.ntp.training.train as ntp_train
    from embgeo.core.threads import limit_threads
    from embgeo.ntp import synthetic

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    seen = []
    real = ntp_train._run  # the training loop, called inside the trainer's thread setting
    data = synthetic(6, 5, 8, 2, seed=0)

    def record(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(ntp_train, "_run", record)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        ntp_train.train(data, "gd", 0.1, 3, progress=False, reference=False)
        assert set(seen) == {1} and torch.get_num_threads() == 2
        seen.clear()
        with limit_threads(2):
            ntp_train.train(data, "gd", 0.1, 3, progress=False, reference=False)
        assert set(seen) == {2}
    finally:
        torch.set_num_threads(before)


def test_more_threads_than_cores_is_a_warning(tmp_path):
    from embgeo.core.threads import available_cores

    n = available_cores() + 1
    proc = subprocess.run([*EMBGEO, "--threads", str(n), "list"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "ntp-gd" in proc.stdout
    assert proc.stderr.strip().splitlines() == [
        f"embgeo: warning: --threads {n} exceeds the {available_cores()} core{'s' if available_cores() > 1 else ''} "
        f"this process can use: threads beyond the cores only wait for each other (measured up to 350x slower); use "
        f"--threads {available_cores()} or fewer"]
    proc = subprocess.run([*EMBGEO, "--threads", str(available_cores()), "list"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == ""


def test_commands_without_training_do_not_import_torch(tmp_path):
    """One process runs list, show, refusals of run / sweep / ntp analyze and a small analysis, and checks after
    each that torch was never imported (it cost every such command ~2 s, issue 24)."""
    script = textwrap.dedent("""
        import sys
        from embgeo.cli import main
        calls = [(["list"], 0), (["show", "ntp-gd"], 0), (["run", "ntp-gd", "--set", "seed=-3"], 2),
                 (["sweep", "ntp-gd", "--grid", "lr=0", "--store", "s.sqlite"], 2),
                 (["sweep", "ntp-gd", "--store", "s.sqlite", "--scheduler", "foo"], 2),
                 (["ntp", "analyze", "--synthetic", "10,1000000000,10,2"], 2),
                 (["ntp", "analyze", "--synthetic", "20,8,30,2"], 0)]
        for argv, expected in calls:
            rc = main(argv)
            assert rc == expected, (argv, rc)
            assert "torch" not in sys.modules, argv
        print("no torch")
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "no torch"
