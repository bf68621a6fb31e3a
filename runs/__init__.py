"""The vocabulary of a load run, shared by every layer that makes, stores or shows one:
per-request records, level summaries and the typed events a run emits
(docs/design.md, "The run path").  Imports nothing else of infer-top."""
