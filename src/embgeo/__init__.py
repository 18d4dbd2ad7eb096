"""embgeo: the geometry of learned embeddings, from three papers, computed and measured."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("embgeo")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+local"
