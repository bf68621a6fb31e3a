"""``infer-top report``: one self-contained HTML file, opened in Debian's Chromium through
playwright (docs: /work/shared/reference/browser): no console error, no request but the
file itself, the charts drawn, and every number in the tables the store's own (issue 21,
point 4).  From the demo's seed-calibrated engines (the seed's H100 table, marked
simulated) and from a real llama-server run beside them."""

from __future__ import annotations

import os
import re
import struct
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from alerts import Alert, Severity
from control.demo_runs import simulate_seed_table
from store import Store, open_store
from store.models import ComparisonRow
from tests.conftest import IN_CI, Rig
from tests.control.llama import bench_saved, llama_server
from tests.loadgen.conftest import ROOT, infer_top_argv

CHROMIUM = "/usr/bin/chromium"
REAL_LOAD = ("--concurrency", "1,2,4", "--requests", "12", "--input-len", "32",
             "--output-len", "32")  # fmt: skip
PRICE_PER_HOUR = 2.50
SEED_TABLE = {  # /work/shared/DESIGN.md: H100, Llama-2-7B class, 64 concurrent, tok/s
    "trtllm": 7535,
    "lmdeploy": 4246,
    "vllm": 4107,
    "ollama": 588,
    "llamacpp": 431,
}


def _browser_reason() -> str | None:
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (the test extra: pip install playwright)"
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} missing: scripts/rig.sh installs Debian's chromium"
    return None


@pytest.fixture
def browser_ready() -> None:
    reason = _browser_reason()
    if reason:
        if IN_CI:
            pytest.fail(f"CI=true and the report cannot be opened: {reason}", pytrace=False)
        pytest.skip(reason)


@dataclass(frozen=True)
class Cell:
    table: str
    run: str
    level: int | None
    metric: str
    value: float | None
    text: str


@dataclass(frozen=True)
class Page:
    console_errors: list[str]
    requests: list[str]
    svg_paths: int
    cells: list[Cell]
    text: str


async def _open(uri: str) -> Page:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = await browser.new_page()
            errors: list[str] = []
            requests: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            await page.goto(uri, wait_until="load")
            paths = await page.locator("svg path").count()
            raw = await page.eval_on_selector_all(
                "td[data-metric]",
                """els => els.map(e => [e.closest('table').id || e.closest('table').className,
                    e.closest('tr').dataset.run, e.closest('tr').dataset.level ?? null,
                    e.dataset.metric, e.dataset.value, e.textContent])""",
            )
            text = await page.inner_text("body")
        finally:
            await browser.close()
    cells = [
        Cell(t, run, None if lv is None else int(lv), m, float(v) if v else None, txt)
        for t, run, lv, m, v, txt in raw
    ]
    return Page(errors, requests, paths, cells, text)


def _store_values(row: ComparisonRow, st: Store) -> dict[str, float | None]:
    """What each column must show, straight from the store (and the cost formula)."""
    (s,) = [lv.summary for lv in st.levels(row.run_id) if lv.summary.level_index == row.level_index]
    return {
        "output_tok_s": row.output_tok_s,
        "request_s": row.request_s,
        "ttft_p50": s.ttft_s.p50,
        "ttft_p99": s.ttft_s.p99,
        "itl_p50": s.itl_s.p50,
        "itl_p99": s.itl_s.p99,
        "tpot_p50": s.tpot_s.p50,
        "e2e_p99": s.e2e_s.p99,
        "failure_rate": row.failure_rate,
        "goodput_req_s": s.goodput_req_s,
        "gpu_util_pct": row.mean_gpu_util_pct,
        "gpu_mem_peak": row.peak_gpu_mem_bytes,
        "kv_peak": row.kv_cache_peak,
        "power_w": row.mean_power_w,
        "tok_per_j": row.tok_per_j,
        "cost_m_tok": PRICE_PER_HOUR / (3600 * row.output_tok_s) * 1e6,
        "cost_m_req": PRICE_PER_HOUR / (3600 * row.request_s) * 1e6,
        "energy_cost_m_tok": None,  # no GPU telemetry stored for these runs: n/a, never 0
    }


def _shown(text: str) -> float:
    return float(text.replace(",", ""))


def _check_tables(page: Page, st: Store, run_ids: list[str]) -> None:
    rows = {(r.run_id, r.level_index): r for r in st.compare(run_ids).rows}
    expected = {key: _store_values(row, st) for key, row in rows.items()}
    seen: dict[tuple[str, int], set[str]] = {}
    for cell in (c for c in page.cells if c.table == "levels"):
        assert cell.level is not None
        want = expected[(cell.run, cell.level)][cell.metric]
        seen.setdefault((cell.run, cell.level), set()).add(cell.metric)
        if want is None:
            assert cell.value is None and cell.text == "n/a", cell
            continue
        assert cell.value == pytest.approx(want, rel=1e-12), cell
        scales = {"failure_rate": 100.0, "kv_peak": 100.0, "gpu_mem_peak": 2.0**-30}
        scale = scales.get(cell.metric, 1000.0 if "_p" in cell.metric else 1.0)
        digits = len(cell.text.split(".")[1]) if "." in cell.text else 0
        assert _shown(cell.text) == pytest.approx(want * scale, abs=0.51 * 10**-digits), cell
    assert set(seen) == set(rows)  # every level of every run, every column
    assert all(metrics == set(expected[key]) for key, metrics in seen.items())


def _report(db: Path, out: Path, *run_ids: str) -> str:
    """``infer-top report RUN... -o OUT`` (charts beside it, SVG and PNG); the report's
    file URI."""
    argv = infer_top_argv("report", *run_ids, "-o", str(out), "--db", str(db),
                          "--price-per-hour", str(PRICE_PER_HOUR),
                          "--charts", str(out.parent), "--png")  # fmt: skip
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return out.resolve().as_uri()


@pytest.fixture
def seed_store(tmp_path: Path) -> Iterator[tuple[Path, list[str]]]:
    db = tmp_path / "runs.db"
    with open_store(db) as st:
        ids = simulate_seed_table(st, node="h100-sim", start_epoch=1.7e9, id_prefix="seed")
    yield db, ids


async def test_the_seed_table_as_a_report_marked_simulated(
    browser_ready: None, seed_store: tuple[Path, list[str]], tmp_path: Path
) -> None:
    db, ids = seed_store
    out = tmp_path / "out" / "report.html"
    uri = _report(db, out, *ids)
    page = await _open(uri)

    assert page.console_errors == []
    assert page.requests == [uri]  # nothing fetched but the file
    assert page.svg_paths == 2 * len(ids)  # a line per run on each chart
    with open_store(db) as st:
        _check_tables(page, st, ids)
        at_64 = {r.run_id: r for r in st.compare(ids).rows if r.concurrency == 64}
    headline = [c for c in page.cells if c.table == "headline" and c.metric == "output_tok_s"]
    assert [c.run for c in headline] == ids
    for cell in headline:  # the store's number, and the seed's within 10 %
        assert cell.value == at_64[cell.run].output_tok_s
        kind = next(k for k in SEED_TABLE if k in cell.run)
        assert cell.value == pytest.approx(SEED_TABLE[kind], rel=0.10)
    assert "output tok/s at 64 concurrent" in page.text
    assert "Simulated numbers." in page.text
    assert page.text.count("simulated †") >= len(ids) * 8  # every level row and headline row
    # the charts for slides: the same SVG, standalone, and drawn as PNG at its size
    for name in ("throughput", "ttft"):
        svg = (out.parent / f"{name}.svg").read_text()
        assert svg.startswith("<svg") and svg.count("<path") == len(ids)
        png = (out.parent / f"{name}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = struct.unpack(">II", png[16:24])  # IHDR
        assert f'width="{width}" height="{height}"' in svg
        assert len(png) > 10_000  # lines and text drawn, not a blank page


@pytest.mark.docker
async def test_a_real_llama_cpp_run_beside_the_demo_runs(
    browser_ready: None, rig: Rig, seed_store: tuple[Path, list[str]], tmp_path: Path
) -> None:
    db, ids = seed_store
    with llama_server(rig, tmp_path / "llama.log", slots=4) as url:
        real = await bench_saved(url, db, "llama.cpp tiny", *REAL_LOAD)
    with open_store(db) as st:  # an alert raised while it ran, as the TUI stores it
        run = st.get_run(real)
        st.save_alert(
            Alert(id="a1", rule="engine_exited", title="engine exited", severity=Severity.CRITICAL,
                  node="lab-1", gpu_index=None, engine_id="e1", value=137.0,
                  message="llama-server exited with 137", raised_at=run.created_at + 0.5,
                  cleared_at=time.time(), run_id=real)
        )  # fmt: skip
    out = tmp_path / "report.html"
    uri = _report(db, out, real, ids[2])
    page = await _open(uri)

    assert page.console_errors == []
    assert page.requests == [uri]
    assert page.svg_paths == 4  # two runs, two charts
    with open_store(db) as st:
        _check_tables(page, st, [real, ids[2]])
    real_rows = {c.level for c in page.cells if c.run == real and c.table == "levels"}
    assert real_rows == {0, 1, 2}
    assert "llama-server exited with 137" in page.text  # the alerts during the run
    assert re.search(r"output tok/s at 4 concurrent", page.text)  # the highest shared level
    assert "measured" in page.text and "simulated †" in page.text
