"""The library the Cloud Functions share, by layer: the entry points' HTTP (``handlers``), what each request
does (``usecases``), the agent (``agent``), what a session waits on (``asks``), Cloud Tasks (``queue``) and the
internal entry points' OIDC (``auth``), Slack (``slack``) and Firestore (``state``), and the core modules
(``config``, ``config_values``, ``deps``, ``logs``, ``limits``, ``errors``). Each package's ``__init__`` says what
it may import; import-linter checks it (pyproject.toml). Never imports ``ops`` or ``infra``.
"""
