"""The event log in PostgreSQL: one queue shared by daemons on many machines.

:mod:`.log` has ``PostgresLog`` (``specs/log-storage.md`` §12), :mod:`.liveness` has
``PgLiveness`` (session advisory locks tell live daemons from dead ones), :mod:`.url`
parses ``postgresql://...?queue=name`` storage URLs and :mod:`.history` reads a queue's
full history. Every module but :mod:`.url` needs psycopg 3 (``snerd-py[postgres]``),
so nothing is imported here.
"""
