"""Child for the kill -9 test: writes requests through the store's writer
thread without pause and, after each flush returns, prints the highest
request index that is now committed.  The parent kills it mid-write."""

from __future__ import annotations

import sys

from store import open_store
from tests.store.conftest import record


def main(path: str) -> None:
    st = open_store(path)
    run_id = st.create_run(name="killed", run_id="killedrun")
    n = 0
    while True:
        for _ in range(20):  # several queue items per flush: the writer batches them
            st.add_requests(record(run_id, 0, i) for i in range(n, n + 25))
            n += 25
        st.flush()
        sys.stdout.write(f"{n - 1}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1])
