"""Anything a session waits on: questions to the operator (ask, cancel older ones, remind, abandon) and
their answers (who may answer, option matching, the resume-or-note rule), approvals, and delegated children.

May import ``shared.slack``, ``shared.state`` and the core modules; never ``shared.agent`` (the agent asks, the
asks never run the agent).
"""
