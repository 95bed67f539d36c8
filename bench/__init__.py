"""Benchmarks: ingress latency against Slack Bolt, cold start, Firestore cost, scale, the agent loop, resuming, trees.

``python -m bench.run`` (``make bench``) runs them against a local stack of their own and writes ``BENCHMARKS.md``
and ``bench/results.json``. The shared harness: ``harness`` (the stack), ``rig`` (the product run in this process),
``paths`` (paths timed in turns), ``figures`` (figures, sections, statistics), ``report`` (the writing); every other
module is one figure, registered in ``run.FIGURES``. Nothing here is imported by the product.
"""
