"""Benchmarks: ingress latency against Slack Bolt, cold start, Firestore cost, scale, agent loop overhead.

``python -m bench.run`` (``make bench``) runs them against a local stack of their
own and writes ``BENCHMARKS.md`` and ``bench/results.json``. Nothing here is
imported by the product.
"""
