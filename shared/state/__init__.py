"""The durable state: typed models, deterministic ids, the Firestore layer split by aggregate (events, sessions
with their lease, steps and notes, questions and threads, the sweep's queries, the index list), Cloud Tasks and
OIDC.

May import the core modules only. Storage holds no product rules: it offers transactional reads and writes, and
the use cases decide.
"""
