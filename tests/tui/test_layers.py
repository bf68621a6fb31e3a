"""tui/ is layered so one screen can change without touching the others.

The import graph (grimp, with imports under TYPE_CHECKING and inside functions):
no module of tui imports itself back through others; a screen builds on the
shared screen modules and widgets, never on another screen; tui is Textual code
(the few launchers that are not reach only tui and control); control draws
nothing (neither tui nor Textual).
"""

from __future__ import annotations

import sys

import grimp
import pytest

SHARED_SCREEN_MODULES = frozenset({"tui.screens.base", "tui.screens.shared"})
"""What screens build on (base class, host protocol, shared behaviour): not screens."""
LAUNCHERS = frozenset({"tui.cli", "tui.commands", "tui.demo"})
"""The ``infer-top`` entry and its commands: they open the app and hold no Textual code."""
PACKAGES = frozenset({"tui", "tui.screens"})
TEXTUAL = frozenset({"textual", "textual_plotext"})


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("tui", "control", include_external_packages=True, cache_dir=None)


def tui_modules(graph: grimp.ImportGraph) -> set[str]:
    return {m for m in graph.modules if m == "tui" or m.startswith("tui.")}


def test_no_import_cycle_within_tui(graph: grimp.ImportGraph) -> None:
    modules = tui_modules(graph)
    cycles = set()
    for module in modules:
        for imported in graph.find_modules_directly_imported_by(module) & modules:
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back is not None:
                cycles.add(" -> ".join((module, *back)))
    assert not cycles, "import cycles in tui:\n" + "\n".join(sorted(cycles))


def test_no_screen_imports_another_screen(graph: grimp.ImportGraph) -> None:
    screens = graph.find_children("tui.screens") - SHARED_SCREEN_MODULES
    assert {"tui.screens.fleet", "tui.screens.history"} <= screens  # the graph saw the screens
    offenders = sorted(
        f"{importer} imports {imported}"
        for importer in screens | SHARED_SCREEN_MODULES
        for imported in graph.find_modules_directly_imported_by(importer) & screens
    )
    assert not offenders, "shared pieces belong in tui.widgets or tui.screens.shared:\n" + (
        "\n".join(offenders)
    )


def test_no_screen_module_imports_the_app(graph: grimp.ImportGraph) -> None:
    """Screens reach the app through the ScreenHost protocol it hands them."""
    offenders = sorted(
        " -> ".join(chain)
        for module in graph.find_descendants("tui.screens")
        if (chain := graph.find_shortest_chain(importer=module, imported="tui.app"))
    )
    assert not offenders, "\n".join(offenders)


def test_tui_holds_textual_code_only(graph: grimp.ImportGraph) -> None:
    """Every tui module draws with Textual; a launcher that does not imports nothing but
    tui, control and the standard library (wiring lives in control, e.g. control.demo)."""
    not_textual = sorted(
        m
        for m in tui_modules(graph) - LAUNCHERS - PACKAGES
        if not graph.find_modules_directly_imported_by(m) & TEXTUAL
    )
    assert not not_textual, f"no Textual here, so it belongs in control/: {not_textual}"
    stray = sorted(
        f"{launcher} imports {imported}"
        for launcher in LAUNCHERS
        for imported in graph.find_modules_directly_imported_by(launcher)
        if imported.split(".")[0] not in {"tui", "control", *sys.stdlib_module_names}
    )
    assert not stray, "wiring belongs in control/:\n" + "\n".join(stray)


def test_control_imports_neither_tui_nor_textual(graph: grimp.ImportGraph) -> None:
    control = {m for m in graph.modules if m == "control" or m.startswith("control.")}
    offenders = sorted(
        f"{module} imports {imported}"
        for module in control
        for imported in graph.find_modules_directly_imported_by(module)
        if imported.split(".")[0] in {"tui", *TEXTUAL}
    )
    assert not offenders, "\n".join(offenders)
