"""infer-top's control plane: the Textual app (the only package importing Textual)."""

from agents import __version__

__all__ = ["__version__"]
