"""Event names and the field names of a log record (no behaviour: see ``events``).

Task fields use SnerdMQ's camelCase names so SnerdMQ's own tools read our logs; the
fields that are ours (event, seq, ts, daemon, attempt, ...) are listed apart. A record
without ``event`` is a SnerdMQ state line and replays as an upsert.
"""

from __future__ import annotations

from typing import Final

# --- event types (past tense: facts that happened) -------------------------------

ENQUEUED: Final = "enqueued"
CLAIMED: Final = "claimed"
PROGRESSED: Final = "progress"
SUCCEEDED: Final = "succeeded"
RETRY_SCHEDULED: Final = "retry_scheduled"
DEAD_LETTERED: Final = "dead_lettered"
RESCHEDULED: Final = "rescheduled"
CANCELLED: Final = "cancelled"
REQUEUED: Final = "requeued"
CLAIM_RELEASED: Final = "claim_released"
PURGED: Final = "purged"
RATE_WINDOW: Final = "rate_window"
SNAPSHOT: Final = "snapshot"
DEDUPLICATED: Final = "deduplicated"
COUNTERS: Final = "counters"

FULL_STATE_EVENTS: Final = frozenset(
    {ENQUEUED, SUCCEEDED, RETRY_SCHEDULED, DEAD_LETTERED, RESCHEDULED, CANCELLED, REQUEUED}
)
"""Events that carry the task's whole latest state (SnerdMQ readers upsert them)."""

LIGHT_EVENTS: Final = frozenset(
    {CLAIMED, PROGRESSED, CLAIM_RELEASED, PURGED, RATE_WINDOW, DEDUPLICATED, COUNTERS}
)
"""Events that carry only what they change."""

ALL_EVENTS: Final = FULL_STATE_EVENTS | LIGHT_EVENTS | {SNAPSHOT}

# --- reasons ----------------------------------------------------------------------

REASON_MAX_RETRIES: Final = "retries_exhausted"
REASON_FAILED_PARENT: Final = "blocked_by_failed_parent"
REASON_TIMEOUT: Final = "timeout"
REASON_OWNER_DIED: Final = "owner_died"
REASON_LEASE_EXPIRED: Final = "lease_expired"
REASON_DRAIN: Final = "drain"
REASON_PERMANENT: Final = "failed_permanently"
"""The handler said the failure is final (``snerd.Fail``, ``"retry": false``): no retries."""

# --- our fields -------------------------------------------------------------------

F_EVENT: Final = "event"
F_SEQ: Final = "seq"
F_TS: Final = "ts"  # milliseconds since the Unix epoch, integer
F_DAEMON: Final = "daemon"
F_ATTEMPT: Final = "attempt"
F_REASON: Final = "reason"
F_LEASE_UNTIL: Final = "leaseUntil"  # milliseconds since the Unix epoch
F_DATA: Final = "data"  # progress payload
F_DLQ_KEY: Final = "dlqKey"
F_GROUP: Final = "group"
F_TIMES: Final = "times"
F_COMPACTED: Final = "compacted"  # a snapshot line written by compaction
F_RESULT: Final = "result"
"""On a ``succeeded`` (or a cron task's ``rescheduled``) line: the handler's return
value, any JSON value; absent when it returned nothing (null)."""
F_TYPE: Final = "type"  # the task type on a light line (``deduplicated``)
F_DUPLICATE_OF: Final = "duplicateOf"  # the live task a deduplicated enqueue matched
F_WAITED: Final = "waited"  # ms a claimed attempt waited since it was due
F_COUNTS: Final = "counts"  # ``counters``: {type: {metric: n}}
F_HISTOGRAMS: Final = "histograms"  # ``counters``: {name: {type: {buckets, sum}}}
F_RETRY_DELAY: Final = "retryDelay"
"""Ours, on ``retry_scheduled``: the backoff chosen for this retry, in seconds (with the
jitter the shell drew already applied; ``retryAfterTime`` = ``ts`` + it)."""
F_TASK: Final = "task"
"""The task a light line (claimed, progress, claim_released, purged) is about. Not
``taskId``: SnerdMQ's readers (its SDKs' dashboards) take the last line with a
``taskId`` as the task's whole state, which a light line is not. Logs written before
this name carry ``taskId`` on light lines; every reader of ours takes either
(:func:`snerd.projections.events.task_id_of`)."""

# --- SnerdMQ task fields -----------------------------------------------------------

F_TASK_ID: Final = "taskId"
F_TASK_TYPE: Final = "taskType"
F_TASK_DATA: Final = "taskData"
F_RETRY_COUNT: Final = "retryCount"
F_MAX_RETRIES: Final = "maxRetries"
F_RETRY_AFTER_HOURS: Final = "retryAfterHours"
F_RETRY_AFTER_TIME: Final = "retryAfterTime"
F_EXECUTE_AT: Final = "executeAt"
F_DELETED_AT: Final = "deletedAt"
F_URGENCY: Final = "urgencyScore"
F_RATE_GROUP: Final = "rateLimitGroup"
F_MAX_PER_MINUTE: Final = "maxPerMinute"
F_AUTO_DEDUPE: Final = "autoDedupe"
F_FINGERPRINT: Final = "payloadHash"  # SnerdMQ's name: xxh64(type + data), hex
F_CRON: Final = "cronExpression"
F_WEBHOOK_URL: Final = "webhookUrl"
F_MAX_EXECUTION_SECONDS: Final = "maxExecutionSeconds"
F_POOL: Final = "pool"
F_TRIGGER_AFTER_IDS: Final = "triggerAfterIds"
F_LAST_ERROR: Final = "LastJobError"  # SnerdMQ's spelling: {"error": str, "retry_worthy": bool}
F_LAST_ERROR_TEXT: Final = "LastErrorObj"  # SnerdMQ's plain-text copy of the last error
F_CREATED_AT: Final = "createdAt"
F_CRON_TEXT: Final = "cronText"
"""Ours: the cron text as given, when ``cronExpression`` holds the form SnerdMQ's
reader takes instead (six fields, seconds first: ``schedule.snerdmq_cron``)."""
F_MAX_EXECUTION_EXACT: Final = "maxExecutionSecondsExact"
"""Ours: a timeout that is not a whole number of seconds, exactly; SnerdMQ reads
``maxExecutionSeconds`` as an integer, so that field holds it rounded up."""
OUR_TASK_FIELDS: Final = frozenset({F_CRON_TEXT, F_MAX_EXECUTION_EXACT})
"""Our fields that restate a SnerdMQ task field exactly (read back into it, so never
kept as unknown fields)."""
F_RETRY_BACKOFF: Final = "retryBackoff"
"""Ours: ``"exponential"`` for exponential backoff with jitter; absent = SnerdMQ's fixed
``retryAfterHours``."""
F_RETRY_MAX_DELAY: Final = "retryMaxDelay"
"""Ours: the cap of an exponential backoff, in seconds."""
F_UNKNOWN_PARENTS: Final = "unknownParents"
"""Ours, on a task's lines from its ``enqueued`` on: the ``triggerAfterIds`` that were
neither live nor dead-lettered when it was enqueued (it did not wait for them). Kept
like any field SnerdMQ does not know, so every later line of the task repeats it."""

TASK_FIELDS: Final = frozenset(
    {
        F_TASK_ID,
        F_TASK_TYPE,
        F_TASK_DATA,
        F_RETRY_COUNT,
        F_MAX_RETRIES,
        F_RETRY_AFTER_HOURS,
        F_RETRY_AFTER_TIME,
        F_EXECUTE_AT,
        F_DELETED_AT,
        F_URGENCY,
        F_RATE_GROUP,
        F_MAX_PER_MINUTE,
        F_AUTO_DEDUPE,
        F_FINGERPRINT,
        F_CRON,
        F_WEBHOOK_URL,
        F_MAX_EXECUTION_SECONDS,
        F_POOL,
        F_TRIGGER_AFTER_IDS,
        F_LAST_ERROR,
        F_LAST_ERROR_TEXT,
        F_CREATED_AT,
        F_RETRY_BACKOFF,  # ours, read into the task like pool
        F_RETRY_MAX_DELAY,
    }
)

OUR_FIELDS: Final = frozenset(
    {
        F_EVENT,
        F_SEQ,
        F_TS,
        F_DAEMON,
        F_ATTEMPT,
        F_REASON,
        F_LEASE_UNTIL,
        F_DATA,
        F_DLQ_KEY,
        F_COMPACTED,
        F_RESULT,
        F_RETRY_DELAY,
    }
)
"""Fields we write on full-state lines besides the task's own."""

