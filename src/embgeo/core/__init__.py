"""Shared numerics and validation used by every paper's module."""
