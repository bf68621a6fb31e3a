"""Request parsing and response shapes of the OpenAI-compatible API (and Ollama's own).

Bad input raises ``BadRequest`` with the message the client will see; nothing
here touches the scheduler or the network.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from sim.textgen import chat_prompt_tokens, text_tokens


class BadRequest(ValueError):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class GenRequest:
    """The fields of a generation request the simulator acts on."""

    api: str
    """chat | completions | ollama_chat | ollama_generate"""
    model: str | None
    prompt_tokens: tuple[str, ...]
    stream: bool
    include_usage: bool
    max_tokens: int | None
    ignore_eos: bool
    min_tokens: int | None
    min_new_tokens: int | None


def _opt_int(body: dict[str, Any], key: str, *, minimum: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BadRequest(f"'{key}' must be an integer >= {minimum}, got {value!r}")
    return value


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        parts = [p.get("text", "") for p in content if isinstance(p, dict)]
        return " ".join(str(p) for p in parts)
    raise BadRequest("message content must be a string or a list of content parts")


def _messages(body: dict[str, Any]) -> tuple[str, ...]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list")
    pairs: list[tuple[str, str]] = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise BadRequest("each message needs a string 'role'")
        pairs.append((m["role"], _content_text(m.get("content"))))
    return tuple(chat_prompt_tokens(pairs))


def json_object(raw: bytes) -> dict[str, Any]:
    """A request body that must be one JSON object, or the engine's 400 saying why not."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    return body


def parse_request(api: str, raw: bytes) -> GenRequest:
    body = json_object(raw)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest("'model' must be a string")
    if api in ("chat", "ollama_chat"):
        tokens = _messages(body)
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str) or not prompt:
            raise BadRequest("'prompt' must be a non-empty string")
        tokens = tuple(text_tokens(prompt)) or ("<|bos|>",)
    if api.startswith("ollama"):
        options = body.get("options") or {}
        if not isinstance(options, dict):
            raise BadRequest("'options' must be an object")
        num_predict = _opt_int(options, "num_predict", minimum=-2)
        stream = body.get("stream", True) is not False
        return GenRequest(
            api,
            model,
            tokens,
            stream,
            False,
            None if num_predict is None or num_predict < 1 else num_predict,
            False,
            None,
            None,
        )
    max_tokens = _opt_int(body, "max_completion_tokens", minimum=1)
    if max_tokens is None:
        max_tokens = _opt_int(body, "max_tokens", minimum=1)
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise BadRequest("'stream_options' must be an object")
    return GenRequest(
        api=api,
        model=model,
        prompt_tokens=tokens,
        stream=body.get("stream") is True,
        include_usage=stream_options.get("include_usage") is True,
        max_tokens=max_tokens,
        ignore_eos=body.get("ignore_eos") is True,
        min_tokens=_opt_int(body, "min_tokens", minimum=0),
        min_new_tokens=_opt_int(body, "min_new_tokens", minimum=0),
    )


def error_body(message: str, status: int, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": status}}


@dataclass(frozen=True, slots=True)
class Shaper:
    """Builds the JSON of one response, chunk by chunk."""

    api: str
    request_id: str
    model: str
    created: int
    role_content_null: bool
    """llama.cpp's first chunk carries ``content: null``; vLLM's an empty string."""

    def _chunk(self, choice: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.api == "chat" else "text_completion"
        return {
            "id": self.request_id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": [] if choice is None else [choice],
            **extra,
        }

    def role(self) -> dict[str, Any] | None:
        if self.api != "chat":
            return None
        content = None if self.role_content_null else ""
        delta = {"role": "assistant", "content": content}
        return self._chunk({"index": 0, "delta": delta, "logprobs": None, "finish_reason": None})

    def token(self, text: str) -> dict[str, Any]:
        if self.api == "chat":
            choice = {
                "index": 0,
                "delta": {"content": text},
                "logprobs": None,
                "finish_reason": None,
            }
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": None}
        return self._chunk(choice)

    def finish(self, reason: str) -> dict[str, Any]:
        if self.api == "chat":
            choice = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": reason}
        else:
            choice = {"index": 0, "text": "", "logprobs": None, "finish_reason": reason}
        return self._chunk(choice)

    def usage_chunk(self, usage: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return self._chunk(None, usage=usage, **extra)

    def whole(self, text: str, reason: str, usage: dict[str, Any]) -> dict[str, Any]:
        if self.api == "chat":
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": reason,
            }
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
            obj = "text_completion"
        return {
            "id": self.request_id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": usage,
        }


def usage(prompt: int, completion: int, cached: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def ollama_line(api: str, model: str, text: str) -> dict[str, Any]:
    created = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    if api == "ollama_chat":
        return {
            "model": model,
            "created_at": created,
            "message": {"role": "assistant", "content": text},
            "done": False,
        }
    return {"model": model, "created_at": created, "response": text, "done": False}


def ollama_final(
    api: str,
    model: str,
    reason: str,
    *,
    prompt: int,
    completion: int,
    prompt_s: float,
    eval_s: float,
    total_s: float,
    load_s: float,
) -> dict[str, Any]:
    """The closing object with Ollama's per-response eval counts (durations in ns)."""
    last = ollama_line(api, model, "")
    last.update(
        done=True,
        done_reason=reason,
        total_duration=int(total_s * 1e9),
        load_duration=int(load_s * 1e9),
        prompt_eval_count=prompt,
        prompt_eval_duration=int(prompt_s * 1e9),
        eval_count=completion,
        eval_duration=int(eval_s * 1e9),
    )
    return last
