"""An approval gate's ``model``: it has none. The turn runs a gate itself (runtime.turn.gate):
its one call is the caller's, its end the decision's receipt. This provider only lets the turn
loop treat a gate as any agent (runtime.llm.registry), and is never asked."""

from runtime.llm.actions import ModelError, TurnView


class GateModel:
    in_process = True  # nothing to wait on: the gate's steps run in the turn's block
    uses_memory = False  # a gate's turns are each one call, whatever came before

    def next_action(self, view: TurnView):
        raise ModelError("an approval gate has no model")
