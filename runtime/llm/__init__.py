"""Models: a model looks at the turn so far and says what to do next.

A model keeps no state of its own, so a turn resumed on another worker asks it again and gets
the same answer. The scripted model (runtime.llm.scripted) is one provider; a hosted model's
adapter (runtime.llm.openai_chat) implements the same protocol (runtime.llm.actions) and is
named in runtime.llm.registry. A provider may answer with one action or with a ModelTurn (a
reply holding several actions, and its token usage), and raises ModelError when it cannot
answer at all.
"""
