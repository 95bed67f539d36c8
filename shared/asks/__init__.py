"""Anything a session waits on: questions to the operator (ask, cancel older ones, remind, abandon) and
their answers (who may answer, option matching, the resume-or-note rule), approvals, delegated children, and
stopping a session's tree.

May import ``shared.queue``, ``shared.slack``, ``shared.state`` and the core modules; never ``shared.agent`` or
``shared.usecases`` (the agent asks, the asks never run the agent).
"""
