"""Makes ``fixtures/store-v1.db``: a store file as infer-top's schema v1 wrote it.

Run once when v2 was introduced (``.venv/bin/python -m tests.store.make_v1_fixture``);
the committed file is the fixture, this script is its provenance.  It applies
the real v1 migration (sqlite-utils ``Migrations.apply(stop_before=...)``) and
inserts rows with the v1 columns only, as infer-top 0.1 with schema v1 did.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from sqlite_utils import Database

from store.schema import MIGRATIONS

FIXTURE = Path(__file__).parent / "fixtures" / "store-v1.db"
T0 = 1796051328.0


def _pct(p50: float, p99: float) -> dict[str, float | None]:
    return {"p50": p50, "p90": p99 * 0.9, "p95": p99 * 0.95, "p99": p99, "p999": p99, "mean": p50}


def make(path: Path = FIXTURE) -> None:
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path)
    db = Database(conn, execute_plugins=False)
    MIGRATIONS.apply(db, stop_before="0002_itl_and_history")
    c = conn.cursor()
    c.execute(
        "INSERT INTO nodes VALUES ('h200-1', 'nvidia', '10.0.0.7:7777', ?, 0, ?, ?)",
        (json.dumps(["NVIDIA H200"]), T0 - 3600, T0 + 60),
    )
    c.execute(
        "INSERT INTO deployments VALUES ('dep-llama', 'h200-1', 'llamacpp', "
        "'infer-top/llama-server:0.3.36-r1', ?, '[0]', ?, ?, 0)",
        (json.dumps({"ctx_size": 4096, "parallel": 64}), T0 - 120, T0 + 60),
    )
    levels = json.loads(
        (Path(__file__).parents[1] / "fixtures" / "h200-llamacpp" / "load-levels.json").read_text()
    )
    c.execute(
        "INSERT INTO runs VALUES ('v1run000001', 'llama.cpp c1-64', 'llamacpp', 'h200-1', "
        "'dep-llama', ?, ?, ?, 0, 'completed', ?, ?)",
        (
            json.dumps({"model": "tiny-llama"}),
            json.dumps({"prompt_tokens": 128, "output_tokens": 64}),
            json.dumps({"infer-top": "0.1.0", "llama.cpp": "b6000"}),
            T0 - 1,
            T0 + 30,
        ),
    )
    for i, lv in enumerate(levels):
        n, span = lv["requests"], lv["t_end"] - lv["t_start"]
        pct = {
            "ttft_s": _pct(lv["ttft_p50_ms"] / 1000, lv["ttft_p99_ms"] / 1000),
            "tpot_s": _pct(0.01, 0.02),
            "itl_s": _pct(0.01, 0.03),
            "e2e_s": _pct(0.5, 0.9),
            "ttft_from_schedule_s": _pct(lv["ttft_p50_ms"] / 1000, lv["ttft_p99_ms"] / 1000),
        }
        c.execute(
            "INSERT INTO levels VALUES (?, ?, ?, NULL, ?, ?, ?, 0, 0, ?, ?, ?, ?, NULL, ?, ?, ?, "
            "?, '{}', ?, ?, 0, NULL, NULL, NULL)",
            (
                "v1run000001", i, lv["concurrency"], lv["t_start"], lv["t_end"], n,
                lv["output_tok_per_s"], lv["output_tok_per_s"] * 1.5, n / span, n / span,
                pct["ttft_s"]["p50"], pct["ttft_s"]["p99"], 0.01, json.dumps(pct),
                int(lv["output_tok_per_s"] * span), n * 128,
            ),
        )  # fmt: skip
        for r in range(n):
            sent = lv["t_start"] + r * span / n
            c.execute(
                "INSERT INTO requests (run_id, level_index, request_index, scheduled_at, sent_at, "
                "first_token_at, end_at, prompt_tokens, output_tokens, usage_completion_tokens, "
                "counted_output_tokens, chunk_count, error_kind, http_status, error_message, "
                "incomplete) VALUES (?, ?, ?, ?, ?, ?, ?, 128, 64, 64, 64, 64, NULL, 200, NULL, 0)",
                ("v1run000001", i, r, sent, sent, sent + lv["ttft_p50_ms"] / 1000, sent + 0.6),
            )
    trace = json.loads(
        (Path(__file__).parents[1] / "fixtures" / "h200-llamacpp" / "nvml-trace.json").read_text()
    )["trace"]
    for k, t in enumerate(trace):  # the real H200 readings taken during this run's levels
        c.execute(
            "INSERT INTO gpu_samples VALUES ('h200-1', ?, 0, ?, ?, ?, ?, ?, ?)",
            (t["t"], t["util_gpu"], t["mem_used"], t["power_mw"] / 1000, t["energy_mj"] / 1000,
             t["temp_c"], t["sm_mhz"]),
        )  # fmt: skip
        if k % 10 == 0:
            c.execute(
                "INSERT INTO engine_samples VALUES ('h200-1', ?, 'dep-llama', 'llamacpp', NULL, "
                "?, 0, 0, ?, NULL, NULL)",
                (t["t"], float(k % 64), 1300.0),
            )
    for kind, dts in (("start", -120), ("healthy", -100), ("swap", 40)):
        c.execute(
            "INSERT INTO events (ts, node, kind, deployment_id, message) VALUES (?, 'h200-1', ?, "
            "'dep-llama', ?)",
            (T0 + dts, kind, f"{kind} llama-server"),
        )
    conn.commit()
    conn.execute("VACUUM")
    conn.close()


if __name__ == "__main__":
    make()
    print(f"wrote {FIXTURE}")
