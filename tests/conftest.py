"""Shared fixtures: the registry narrowed to a few experiments, or extended by a paper built in the test."""

from __future__ import annotations

import dataclasses
import os

import pytest

from embgeo.lab import registry

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Two workers share CI's two cores: one BLAS / OpenMP thread each, not two each (the suite's wall time).
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)


@pytest.fixture
def only_experiments(monkeypatch):
    """``only_experiments("ntp-examples", ...)``: the registry holds those experiments alone (their papers keep
    their titles and order), until the test ends."""

    def restrict(*names: str) -> None:
        unknown = set(names) - set(registry.experiments())
        assert not unknown, unknown
        kept = {}
        for paper in registry.papers():
            chosen = tuple(e for e in paper.experiments if e.name in names)
            if chosen:
                kept[paper.name] = dataclasses.replace(paper, experiments=chosen)
        monkeypatch.setattr(registry, "_PAPERS", kept)

    return restrict


@pytest.fixture
def with_papers(monkeypatch):
    """``with_papers(paper, ...)``: the registry holds the installed papers and these, until the test ends (an
    installed paper of the same name is replaced)."""

    def extend(*papers: registry.Paper) -> None:
        found = {p.name: p for p in registry.papers()}
        found.update({p.name: p for p in papers})
        monkeypatch.setattr(registry, "_PAPERS", found)

    return extend
