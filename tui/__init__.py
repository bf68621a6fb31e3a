"""infer-top's control plane: the Textual app (the only package importing Textual)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("infer-top")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0+unknown"
