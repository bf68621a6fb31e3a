"""``python -m agents.hub_worker``: one planned Hugging Face pull (``agents.hub_pull``),
run by the agent in a process of its own so that a cancel ends it at once.

Reads ``{"repo", "revision", "cache_dir", "files"}`` on stdin (the token comes in
``HF_TOKEN``, never on the command line) and fetches exactly those files with
``huggingface_hub.snapshot_download``: its cache layout, its locks, its resume of a
connection dropped mid-file (``Range``). Prints one JSON line last: ``{"path"}`` of the
snapshot, or ``{"error"}`` in words with exit status 1.
"""

from __future__ import annotations

import json
import re
import sys


def main() -> int:
    job = json.load(sys.stdin)
    from huggingface_hub import snapshot_download

    from agents.hub_pull import hub_words

    # exact names: a pattern's *, ? and [ stand for themselves
    patterns = [re.sub(r"([*?[])", r"[\1]", name) for name in job["files"]]
    try:
        path = snapshot_download(
            job["repo"],
            revision=job["revision"],
            cache_dir=job["cache_dir"],
            allow_patterns=patterns,
            max_workers=4,
        )
    except Exception as exc:  # the process's boundary: every failure reaches the agent in words
        print(json.dumps({"error": f"{type(exc).__name__}: {hub_words(exc)}"}), flush=True)
        return 1
    print(json.dumps({"path": path}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
