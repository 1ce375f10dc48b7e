"""rpc/: the stdio wire protocol, the daemon entry point and the thin client."""
