"""The local stack and what runs on it: the emulators, fakes and functions started and stopped by pid
(``stack``, ``procs``), ``make dev`` (``dev``, ``guard``), the terminal chat (``chat``), the fakes
(``infra.fakes``), and the pieces tests, faults and benchmarks share (``product_env``, ``restarts``, ``signing``,
``slack_payloads``, ``browser``, ``screenshot``).

May import ``shared`` and ``ops``; neither ever imports this package (import-linter, pyproject.toml).
"""
