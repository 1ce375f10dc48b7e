"""Read models: the one status vocabulary and the pure views every face shows.

The daemon's ``stats``/``get`` replies, the CLI tools (``snerd/tools``), the embedded
``Queue`` and the dashboard (``snerd/dashboard``) all read the queue through these
modules, so a task has one status and a figure one meaning wherever it is shown.

============  ===========================================================================
``status``    the status vocabulary (pending, scheduled, blocked, active, completed,
              dead_lettered, cancelled), :func:`~.status.status_of`, counts per status
``tasks``     one task: the ``get`` reply, the dashboard's rows (SDK keys), the DLQ list
``stats``     the ``stats`` reply, rate-limit groups, metrics (event counts) and totals
``dag``       the DAG around one task
``timeline``  one task's history as timeline entries (from the audit fold)
============  ===========================================================================

Pure like the rest of the core: no I/O, no clock reads (``now`` is an argument), no
randomness; views take the state (and records, or a lookup of recently finished
tasks) as arguments, never an engine. The modules are imported one by one (this
package re-exports nothing, so the audit fold can use :mod:`.status` without a cycle).
"""
