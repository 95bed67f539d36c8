"""A scripted Gemini REST stub on loopback, spoken to by the real google-genai client.

Run it with ``python -m infra.fakegemini --port P`` and drive it from tests through
``FakeGemini`` (``infra.fakegemini.control``). ``--demo`` adds an honest, deterministic
offline stand-in for trying the product without Gemini credentials.
"""

from .control import FakeGemini, FakeGeminiError

__all__ = ["FakeGemini", "FakeGeminiError"]
