"""Drop-in integrations with agent frameworks, one module each, each behind its own extra.

- :mod:`progressive_compactor.integrations.langchain` (extra ``[langchain]``):
  ``CompactionMiddleware`` for ``langchain.agents.create_agent``;
- :mod:`progressive_compactor.integrations.pydantic_ai` (extra ``[pydantic-ai]``):
  ``history_processor`` for ``Agent(history_processors=[...])`` (1.x) or
  ``ProcessHistory`` (2.x);
- :mod:`progressive_compactor.integrations.openai_agents` (extra ``[openai-agents]``):
  ``call_model_input_filter`` for ``RunConfig(call_model_input_filter=...)``.

Importing this package imports no framework; each module imports its own when it is imported.
The pieces they share (failing open, the read tool's handler, the records and notices) are in
:mod:`progressive_compactor.integrations.common`.
"""
