"""The imperative shell: reacts to projection deltas, claims work, runs it, records outcomes.

``Engine`` owns one log, one projection state and the executors; ``Queue`` is the
embedded (in-process) face of the same engine.
"""

if __name__ != "snerd.dispatcher":  # one import name per module (README, "Repository layout")
    raise ImportError(
        f"import snerd.dispatcher, not {__name__}: one module under two names would be two "
        "modules, with two different copies of every class in it"
    )
