"""The product's errors: one root, and the kinds a caller may want to tell apart.

Everything the product raises on purpose derives from ``ProductError``, so an entry point can tell a known
refusal from a bug. Each layer keeps its own narrower subclasses beside the code that raises them (for
example ``ConfigError`` in ``shared.config``, ``LeaseLost`` in ``shared.state``); this module holds the root
and the kinds shared across layers.
"""

from __future__ import annotations


class ProductError(Exception):
    """Root of every error the product raises on purpose."""


class Refused(ProductError):
    """Bad input or a policy refusal: a clear message, and nothing changed."""


class Unavailable(ProductError):
    """A service the product depends on kept failing after its retries."""


class ShowLater(Unavailable):
    """Slack would not show now what was recorded (rate-limited, a server error, no connection), and only a
    redelivery of the message that caused it would show it: the entry point asks Slack to deliver it again."""


class Contended(Unavailable):
    """A Firestore transaction gave up for contention (its commit aborted on every attempt, or its reads kept timing
    out on other transactions' locks): nothing of it was written, so the request may simply come again. Entry
    points answer it with a retry status and one WARNING line, not a crash's traceback."""
