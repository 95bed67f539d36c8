"""A scripted Gemini REST stub on loopback, spoken to by the real google-genai client.

Run it with ``python -m infra.fakes.gemini --port P`` and drive it from tests through
``FakeGemini`` (``infra.fakes.gemini.client``). ``--demo`` adds an honest, deterministic
offline stand-in for trying the product without Gemini credentials (``demo.py``, its guided tour ``tour.py``).

Imports the standard library and ``infra.fakes.serve`` / ``infra.fakes.control`` only (never google-genai: it
answers the real client's requests over HTTP).
"""

from .client import FakeGemini, FakeGeminiError

__all__ = ["FakeGemini", "FakeGeminiError"]
