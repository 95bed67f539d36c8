"""The durable state: typed models, deterministic ids, the Firestore layer split by aggregate (events, sessions
with their lease, steps and notes, questions and threads, the sweep's queries, the index list), and what a new
record copies from the session it comes from (``origin``).

May import the core modules only. Storage holds no product rules: it offers transactional reads and writes, and
the use cases decide. (Cloud Tasks is ``shared.queue``, OIDC ``shared.auth``.)
"""
