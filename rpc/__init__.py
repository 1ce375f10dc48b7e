"""rpc/: the stdio wire protocol, the daemon entry point and the thin client."""

if __name__ != "snerd.rpc":  # one import name per module (README, "Repository layout")
    raise ImportError(
        f"import snerd.rpc, not {__name__}: one module under two names would be two "
        "modules, with two different copies of every class in it"
    )
