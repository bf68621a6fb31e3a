"""infer-top's node agent: collectors, engine runtimes and a thin aiohttp server."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("infer-top")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0+unknown"
