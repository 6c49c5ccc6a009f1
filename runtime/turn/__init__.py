"""The turn loop: runs one turn of an agent in a Celery worker, step by step, durably.

Every step is committed before the next begins, so a turn survives its worker: the task row
holds the transcript (what the model saw and did), a lease names the worker running it
(runtime.turn.claim), and a periodic sweep gives a turn whose lease ran out to another
worker, which continues where the transcript ends (runtime.turn.runner). The model is asked
again from the same transcript and gives the same next step (runtime.llm). Tool calls are
journalled as effects before they are sent (runtime.turn.calls).
"""
