"""An engine's images onto the node before ``compose up``: a present image is used as it
is (no registry is asked), a missing one is pulled through the Docker API with its layer
progress reported as it arrives, and one that cannot be pulled fails the start with how
to get it.  Compose itself then runs with ``--pull never``: the agent already made sure,
and Compose's own pull would show nothing to the operator."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agents.protocol import ImagePull
from agents.runtime import RuntimeError_

LOCAL_PREFIX = "infer-top/"
"""Images infer-top builds on the node itself (the test rig's); no registry has them."""
_DONE = frozenset({"Pull complete", "Already exists"})


@dataclass(slots=True)
class PullProgress:
    """Docker's pull messages (moby ``jsonmessage``: ``status``, ``id``, ``progressDetail``
    ``{current, total}``) folded into one ImagePull: bytes downloaded of the layers whose
    size Docker has said so far, and layers finished of those announced."""

    image: str
    sizes: dict[str, int] = field(default_factory=dict)
    got: dict[str, int] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)
    layers: set[str] = field(default_factory=set)

    def feed(self, message: Mapping[str, Any]) -> ImagePull:
        layer, status = message.get("id"), str(message.get("status") or "")
        detail = message.get("progressDetail") or {}
        if layer and (status in _DONE or status.startswith(("Pulling fs", "Waiting"))):
            self.layers.add(layer)
        if layer and status == "Downloading" and detail.get("total"):
            self.layers.add(layer)
            self.sizes[layer] = int(detail["total"])
            self.got[layer] = int(detail.get("current") or 0)
        if layer and status in ("Download complete", *_DONE) and layer in self.sizes:
            self.got[layer] = self.sizes[layer]
        if layer and status in _DONE:
            self.finished.add(layer)
        return self.view()

    def view(self, state: str = "pulling") -> ImagePull:
        return ImagePull(
            image=self.image,
            state=state,
            done_bytes=sum(self.got.values()),
            total_bytes=sum(self.sizes.values()) or None,
            layers_done=len(self.finished),
            layers_total=len(self.layers),
        )


def how_to_get(image: str, node: str) -> str:
    """Where an image that is not on the node comes from, as an instruction."""
    if image.startswith(LOCAL_PREFIX):
        return (
            f"{image} is built locally, not pulled: run scripts/rig.sh on node {node} "
            "(it builds infer-top's images), then start again"
        )
    return (
        f"run `docker pull {image}` on node {node} (or `docker load` a saved copy where it "
        "has no registry access), then start again"
    )


def ensure_images(
    client: Any, images: Iterable[str], node: str, report: Callable[[ImagePull], None]
) -> None:
    """Each image present, or pulled with progress to ``report``; RuntimeError_ saying how
    to get one that cannot be pulled.  Blocking (Docker SDK): run it in a thread."""
    import docker.errors

    for image in images:
        try:
            client.images.get(image)
        except docker.errors.ImageNotFound:
            pass
        except Exception as exc:  # APIError, or no daemon (requests' ConnectionError)
            raise RuntimeError_(f"cannot inspect image {image} on node {node}: {exc}") from exc
        else:
            report(ImagePull(image=image, state="present"))
            continue
        progress = PullProgress(image)
        report(progress.view())
        repository, tag = _split(image)
        try:
            for message in client.api.pull(repository, tag=tag, stream=True, decode=True):
                if message.get("error"):
                    raise RuntimeError_(_missing(image, node, str(message["error"])))
                report(progress.feed(message))
        except RuntimeError_:
            raise
        except docker.errors.APIError as exc:
            raise RuntimeError_(_missing(image, node, str(exc.explanation or exc))) from exc
        except Exception as exc:  # the stream stalled past the client's timeout, or broke
            raise RuntimeError_(_missing(image, node, f"{type(exc).__name__}: {exc}")) from exc
        report(progress.view("pulled"))


def _missing(image: str, node: str, reason: str) -> str:
    return f"image {image} is not on node {node} and pulling it failed ({reason}): " + how_to_get(
        image, node
    )


def _split(image: str) -> tuple[str, str | None]:
    """``repo[:tag]`` or ``repo@digest`` as the pull API takes them (a registry host's
    port is no tag)."""
    if "@" in image:
        repository, digest = image.split("@", 1)
        return repository, digest
    head, sep, tag = image.rpartition(":")
    if sep and "/" not in tag:
        return head, tag
    return image, "latest"
