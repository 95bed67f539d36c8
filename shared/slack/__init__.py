"""Everything that speaks Slack: the Web API client and the one posting path (``client``), signature verification
(``verify``), Events API classification (``events``), block action parsing (``actions``), Block Kit builders
(``blocks``, the approval card in ``approval_card``, the call shown inertly in ``call_view``, the Edit modal in
``edit_modal``), mrkdwn (``mrkdwn``, ``mrkdwn_inline``), splitting (``split``), the broadcast neutraliser
(``safety``; with ``links``, no link's label hides its host), the thread surface the agent shows its progress on
(``surface``) and where a conversation's posts go (``placement``), a streamed answer (``stream``,
``stream_safety``), and the back-pressure every Web API call retries under (``backpressure``).

May import the core modules (``shared.config``, ``shared.logs``, ``shared.errors``, ``shared.deps``) only:
nothing here knows about sessions, Firestore or the model.
"""
