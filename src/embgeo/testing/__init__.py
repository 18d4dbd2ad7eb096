"""Support for embgeo's own tests and benchmarks; nothing here is part of the toolkit's API."""
