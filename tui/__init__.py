"""infer-top's Textual app (the only package importing Textual): it draws the control
plane in ``control/``."""

from agents import __version__

__all__ = ["__version__"]
