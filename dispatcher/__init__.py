"""The imperative shell: reacts to projection deltas, claims work, runs it, records outcomes.

``Engine`` owns one log, one projection state and the executors; ``Queue`` is the
embedded (in-process) face of the same engine.
"""
