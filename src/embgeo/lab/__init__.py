"""The experiment machinery, apart from the papers: claims, the registry of papers and experiments, run
contexts and records, the runner, sweeps on Dask, the run store, the HTML report and ``reproduce``.

It imports no paper: papers import it and register themselves through the ``embgeo.papers`` entry points
(:mod:`embgeo.lab.registry`; CONTRIBUTING.md, "Adding a paper"). Modules, from the bottom up:
:mod:`~embgeo.lab.claims`, :mod:`~embgeo.lab.settings`, :mod:`~embgeo.lab.context`,
:mod:`~embgeo.lab.registry`, :mod:`~embgeo.lab.record`, :mod:`~embgeo.lab.runner`,
:mod:`~embgeo.lab.store`, :mod:`~embgeo.lab.sweep`, :mod:`~embgeo.lab.report`, :mod:`~embgeo.lab.reproduce`.
"""
