"""The node's model pulls (``/v1/models-inventory/pull``): each a task that reports its
bytes and rate as a ``ModelPull``, followed by the control plane, cancellable.

A Hugging Face pull runs ``agents.hub_worker`` (planned first by ``agents.hub_pull``)
and reads its progress from the cache's blobs folder, where ``huggingface_hub`` writes
each file as it arrives; a cancel ends the worker and removes the partial file it left
(``huggingface_hub`` 2.x never reuses one: the next pull fetches that file anew and keeps
every file already complete).  An Ollama pull is the running Ollama engine's own
``/api/pull``, its per-layer progress passed on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
import uuid
from collections import deque
from collections.abc import AsyncGenerator, Coroutine
from dataclasses import replace
from typing import Any

import aiohttp

from agents.catalog_adapter import get_spec
from agents.config import AgentConfig
from agents.hub_pull import HubPlan, blob_bytes, partial_files, plan_pull, worker_env
from agents.manager import EngineManager, ManagerError
from agents.model_pull import PullFailed, pull_progress
from agents.protocol import ModelPull, dumps, to_dict
from agents.runtime import Deployment

PROGRESS_S = 0.5
"""How often a pull's bytes are read and sent to its followers."""
RATE_WINDOW_S = 3.0
KEEPALIVE_S = 5.0
STOP_GRACE_S = 5.0
ERROR_CHARS = 400
KEPT_ENDED = 50
"""Ended pulls listed (``GET /v1/models-inventory/pulls``) before the oldest go."""


class PullJob:
    def __init__(self, info: ModelPull) -> None:
        self.info = info
        self.began = time.monotonic()
        self.task: asyncio.Task[None] | None = None
        self._samples: deque[tuple[float, int]] = deque()

    def progress(
        self, done_bytes: int, total_bytes: int | None = None, message: str | None = None
    ) -> None:
        now = time.monotonic()
        total = self.info.total_bytes if total_bytes is None else total_bytes
        if total != self.info.total_bytes or (self._samples and done_bytes < self._samples[-1][1]):
            self._samples.clear()  # another Ollama layer: its own count
        self._samples.append((now, done_bytes))
        while now - self._samples[0][0] > RATE_WINDOW_S:
            self._samples.popleft()
        first_s, first_bytes = self._samples[0]
        rate = (done_bytes - first_bytes) / (now - first_s) if now > first_s else None
        self.info = replace(
            self.info,
            done_bytes=done_bytes,
            total_bytes=total,
            rate_bytes_per_s=rate,
            message=self.info.message if message is None else message,
            elapsed_s=round(now - self.began, 3),
        )

    def finish(self, state: str, message: str, path: str | None = None) -> None:
        elapsed = round(time.monotonic() - self.began, 3)
        self.info = replace(self.info, state=state, message=message, path=path, elapsed_s=elapsed)


class Pulls:
    def __init__(self, config: AgentConfig, manager: EngineManager) -> None:
        self.config = config
        self.manager = manager
        self.jobs: dict[str, PullJob] = {}

    def _begin(self, info: ModelPull) -> PullJob:
        ended = [i for i, j in self.jobs.items() if j.info.final]
        for pull_id in ended[: max(0, len(ended) - KEPT_ENDED)]:  # oldest first
            del self.jobs[pull_id]
        job = PullJob(info)
        self.jobs[info.id] = job
        return job

    def _refuse_twice(self, model: str) -> None:
        for job in self.jobs.values():
            if job.info.model == model and not job.info.final:
                raise ManagerError(409, f"{model} is being pulled already (pull {job.info.id})")

    def _new(self, source: str, model: str, **facts: Any) -> ModelPull:
        return ModelPull(
            id=uuid.uuid4().hex[:12],
            node=self.config.node_name,
            source=source,
            model=model,
            state="pulling",
            started_at=time.time(),
            **facts,
        )

    async def start_hf(
        self,
        repo: str,
        revision: str | None,
        weights_format: str,
        quant: str | None,
        token: str | None,
    ) -> ModelPull:
        self._refuse_twice(repo)
        plan = await asyncio.to_thread(
            plan_pull, self.config, repo, revision, weights_format, quant, token
        )
        self._refuse_twice(repo)  # another asked while the hub answered
        info = self._new(
            "hf",
            repo,
            revision=plan.revision,
            commit=plan.commit,
            files=tuple(f.name for f in plan.files),
            total_bytes=plan.total_bytes,
            done_bytes=plan.present_bytes,
            message=f"fetching {len(plan.files)} files into {plan.cache_dir}",
        )
        job = self._begin(info)
        job.task = asyncio.create_task(_guarded(job, self._run_hf(job, plan, token)))
        return job.info

    async def _run_hf(self, job: PullJob, plan: HubPlan, token: str | None) -> None:
        before = await asyncio.to_thread(blob_bytes, plan)
        partial_before = await asyncio.to_thread(partial_files, plan)
        request = {
            "repo": plan.repo,
            "revision": plan.revision,
            "cache_dir": str(plan.cache_dir),
            "files": [f.name for f in plan.files],
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agents.hub_worker",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=worker_env(token),
        )
        talk = asyncio.create_task(proc.communicate(json.dumps(request).encode()))
        try:
            while not talk.done():
                await asyncio.wait({talk}, timeout=PROGRESS_S)
                now = await asyncio.to_thread(blob_bytes, plan)
                job.progress(min(plan.total_bytes, plan.present_bytes + now - before))
        except asyncio.CancelledError:
            await _end(proc)
            talk.cancel()
            for leftover in await asyncio.to_thread(partial_files, plan) - partial_before:
                leftover.unlink(missing_ok=True)
            job.finish("cancelled", "cancelled: the files already complete are kept")
            raise
        out, err = talk.result()
        answer = _last_json(out)
        if proc.returncode == 0 and "path" in answer:
            job.progress(plan.total_bytes)
            job.finish("done", f"{plan.repo} is in {plan.cache_dir}", path=str(answer["path"]))
        else:
            reason = answer.get("error") or err.decode(errors="replace").strip()[-ERROR_CHARS:]
            job.finish("failed", f"pulling {plan.repo} failed: {reason}")

    async def start_ollama(self, model: str) -> ModelPull:
        self._refuse_twice(model)
        dep = self._ollama()
        job = self._begin(self._new("ollama", model, message=f"pulling through {dep.id}"))
        job.task = asyncio.create_task(_guarded(job, self._run_ollama(job, dep, model)))
        return job.info

    def _ollama(self) -> Deployment:
        for dep in self.manager.deployments.values():
            if dep.kind == "ollama" and dep.state == "ready":
                return dep
        raise ManagerError(
            409,
            f"no Ollama engine is ready on node {self.config.node_name}: Ollama pulls its "
            "models itself; start one (infer-top engine start --kind ollama) and pull again",
        )

    async def _run_ollama(self, job: PullJob, dep: Deployment, model: str) -> None:
        url = f"{dep.url}{get_spec('ollama').model_pull_path}"
        try:
            async with aiohttp.ClientSession() as session:
                async for step in pull_progress(session, url, model):
                    if step.total_bytes is None:  # "verifying sha256 digest": no counts
                        job.progress(job.info.done_bytes, message=step.text())
                    else:
                        job.progress(step.completed_bytes or 0, step.total_bytes, step.text())
        except PullFailed as exc:
            job.finish("failed", f"pulling {model} failed: {exc}")
        except asyncio.CancelledError:
            job.finish("cancelled", "cancelled: Ollama keeps the layers already complete")
            raise
        else:
            job.finish("done", f"{model} is in the Ollama engine {dep.id}'s store")

    def get(self, pull_id: str) -> PullJob:
        job = self.jobs.get(pull_id)
        if job is None:
            raise ManagerError(404, f"no model pull {pull_id} on node {self.config.node_name}")
        return job

    async def follow(self, pull_id: str) -> AsyncGenerator[bytes, None]:
        """The pull as NDJSON: now, at every change, to its final state; a blank line
        every few seconds of quiet."""
        job = self.get(pull_id)
        sent: ModelPull | None = None
        quiet_since = time.monotonic()
        while True:
            info = job.info
            if info is not sent:
                yield dumps(to_dict(info)).encode() + b"\n"
                sent, quiet_since = info, time.monotonic()
                if info.final:
                    return
            elif time.monotonic() - quiet_since > KEEPALIVE_S:
                yield b"\n"
                quiet_since = time.monotonic()
            await asyncio.sleep(PROGRESS_S / 2)

    async def cancel(self, pull_id: str) -> ModelPull:
        job = self.get(pull_id)
        if job.task is not None and not job.task.done():
            job.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await job.task
        return job.info

    async def close(self) -> None:
        for pull_id in list(self.jobs):
            await self.cancel(pull_id)


async def _guarded(job: PullJob, run: Coroutine[None, None, None]) -> None:
    """A pull that fails in a way no step foresaw still ends, failed, in words."""
    try:
        await run
    except Exception as exc:
        job.finish("failed", f"pulling {job.info.model} failed: {type(exc).__name__}: {exc}")


async def _end(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is not None:
        return
    proc.terminate()
    try:
        await asyncio.wait_for(proc.wait(), STOP_GRACE_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()


def _last_json(out: bytes) -> dict[str, object]:
    for line in reversed(out.decode(errors="replace").splitlines()):
        with contextlib.suppress(ValueError):
            data = json.loads(line)
            if isinstance(data, dict):
                return data
    return {}
