"""Issue 40 §5: what importing a paper does to a fresh interpreter, checked once over every registered paper (the
papers found through the ``embgeo.papers`` entry points; a fourth paper gets the same checks): its package, its
``theory`` and ``data`` (numpy rooms) load no torch, its experiments keep the caller's matplotlib backend, and
building the registry loads no torch. Paper-specific rooms stay in tests/<paper>/test_imports.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from embgeo.lab import registry

PAPERS = registry.paper_names()


def _python(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def _root(paper: str) -> str:
    """The package of a registered paper: where its experiments' run functions live (embgeo.ntp, ...)."""
    found = next(p for p in registry.papers() if p.name == paper)
    return ".".join(found.experiments[0].run.__module__.split(".")[:2])


def test_every_installed_paper_is_checked():
    assert {"ntp", "collapse", "attention"} <= set(PAPERS)


@pytest.mark.parametrize("paper", PAPERS)
def test_a_papers_theory_and_data_load_no_torch(paper):
    root = _root(paper)
    for module in (root, f"{root}.theory", f"{root}.data"):
        assert _python(f"import sys, {module}; print('torch' in sys.modules)") == "False", module


@pytest.mark.parametrize("paper", PAPERS)
def test_the_check_sees_torch_where_a_paper_loads_it(paper):
    """The negative control: the same check on the paper's training code reports torch."""
    training = {"ntp": "embgeo.ntp.training.train"}.get(paper, f"{_root(paper)}.train")
    assert _python(f"import sys, {training}; print('torch' in sys.modules)") == "True"


@pytest.mark.parametrize("paper", PAPERS)
def test_a_papers_experiments_keep_the_callers_matplotlib_backend(paper):
    code = (f"import matplotlib; matplotlib.use('pdf'); import {_root(paper)}.experiments; "
            "print(matplotlib.get_backend())")
    assert _python(code) == "pdf"


def test_building_the_registry_loads_no_torch_and_keeps_the_backend():
    code = ("import sys, matplotlib; matplotlib.use('pdf'); from embgeo.lab.registry import papers; papers(); "
            "print('torch' in sys.modules, matplotlib.get_backend())")
    assert _python(code) == "False pdf"
