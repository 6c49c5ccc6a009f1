"""Services of the core: every write to tasks, turns and interactions goes through here.

Each public service is one atomic action that writes its audit row in the same transaction.
Where two actors can race (a caller and an operator on the same interaction, a retried turn
and its original), it locks the task row or claims with a conditional update, and does no
network I/O while a lock is held. Status changes go through runtime.task_state.
"""
