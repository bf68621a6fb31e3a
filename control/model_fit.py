"""A node's models as the start form offers them: how each is named in a start, and its
fit for the chosen GPUs, context and concurrency, from the model's own files."""

from __future__ import annotations

from collections.abc import Sequence

from agents.protocol import ModelInventory
from control.engine_ops import FitView, fit_view
from engines.fit import shape_from_files
from engines.model_files import LocalModel, size_text


def model_ref(model: LocalModel) -> str:
    """What a start names: a file by its path on the node (a native engine opens it
    there), a cached repo by its repo id, an Ollama model by its tag."""
    return model.path if model.source == "file" else model.name


def find_local(models: Sequence[LocalModel], text: str) -> LocalModel | None:
    """The node's model a start form's model field names, if the node holds it."""
    text = text.strip()
    return next((m for m in models if text in (m.name, m.path)), None)


def local_label(model: LocalModel) -> str:
    kind = model.format + (f" {model.quantization}" if model.quantization else "")
    return f"{model.name}  {kind}  {size_text(model.size_bytes)}"


def local_fit(
    model: LocalModel,
    kind: str,
    gpu_mem_bytes: Sequence[int | None],
    context_len: int | None,
    concurrent_seqs: int = 1,
) -> FitView:
    """``fit_view`` with the shape and weight type the model's files state."""
    files = shape_from_files(model)
    if files is None:
        why = model.problem or "its files do not state every figure the estimator needs"
        return FitView(f"fit: no estimate for {model.name} ({why})", None)
    return fit_view(
        kind, model.name, gpu_mem_bytes, context_len, files=files, concurrent_seqs=concurrent_seqs
    )


FIT_MARKS = {True: "[green]fits[/]", False: "[bold red]no fit[/]", None: "[yellow]?[/]"}


def local_fits_text(
    found: ModelInventory,
    kind: str,
    gpu_mem_bytes: Sequence[int | None],
    context_len: int | None,
    concurrent_seqs: int = 1,
) -> str:
    """Each model the node holds with its verdict for the chosen GPUs, context and
    concurrency (Rich markup)."""
    lines = [f"models on {found.node}: {len(found.models)}"]
    for m in found.models:
        try:
            view = local_fit(m, kind, gpu_mem_bytes, context_len, concurrent_seqs)
        except ValueError as exc:  # a context or count the estimator refuses
            lines.append(f"  ? {m.name}: {exc}")
            continue
        lines.append(f"  {FIT_MARKS[view.fits]} {local_label(m)}")
    return "\n".join(lines)
