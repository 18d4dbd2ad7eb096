"""Sphinx configuration of embgeo's documentation (built in CI with warnings as errors: see .ci/run)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))  # the results pages' generator (_ext/results.py)

project = "embgeo"
author = "the embgeo developers"
copyright = "2026, the embgeo developers"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.viewcode"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
napoleon_numpy_docstring = True
napoleon_google_docstring = False
# Docstrings use Sphinx roles for objects of numpy/scipy/torch, which are not documented here: no
# intersphinx (the build runs offline), so references outside embgeo stay plain text.
nitpicky = False
html_theme = "alabaster"
html_theme_options = {"description": "The geometry of learned embeddings: theory objects, training and paper reproductions",
                      "fixed_sidebar": True}
html_static_path: list[str] = []
exclude_patterns = ["_build"]
