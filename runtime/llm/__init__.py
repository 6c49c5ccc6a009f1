"""Models: a model looks at the turn so far and says what to do next.

A model keeps no state of its own, so a turn resumed on another worker asks it again and gets
the same answer. The scripted model (runtime.llm.scripted) is one provider; a hosted model's
adapter implements the same protocol (runtime.llm.actions) and is named in
runtime.llm.registry.
"""
