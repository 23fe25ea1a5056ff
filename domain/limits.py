"""Every bound QuotaFlow puts on its inputs and outputs, each with the reason for it (pure).

A value beyond one of these is refused with a reason that names the field and the limit.
The amounts are chosen so that everything the core derives from accepted inputs (sums over
nodes and jobs, times plus durations, thousandths of a GPU) stays an exact integer that
fits int64 on the wire and, where fair share turns it into a float, below 2**53.
docs/scheduler.md ("Limits") has the same table for people.
"""

from __future__ import annotations

# -- sizes ------------------------------------------------------------------------------

# One ingress record (an event on quotaflow.jobs/nodes/admin), checked before decoding: ample
# for any real event, small enough that its journal record always fits a Kafka record.
INPUT_BYTES_MAX = 64 * 1024
# One `quotaflow simulate` line: a journal record is its input plus seq, ts and the defaults
# written out, so a journal file always simulates.
LINE_BYTES_MAX = 2 * INPUT_BYTES_MAX
# Any record the scheduler writes (journal, command, rejection): under Kafka's default
# max.message.bytes and the producer's max_request_size (1 MiB), with room for batch overhead.
RECORD_BYTES_MAX = 1_000_000
# How much of one input value a reason may quote: enough to recognise it, never the whole.
ECHO_CHARS_MAX = 200
# A whole reason: a few named fields with their messages.
REASON_CHARS_MAX = 1_000
# Field errors named in one reason; the rest are counted.
REASON_ERRORS_MAX = 5
# The refused input as echoed on quotaflow.rejected: every ordinary event whole, and at most
# ~24 KB even when each character is escaped; size and sha256 find the original.
REJECTED_INPUT_CHARS_MAX = 4_096

# -- strings and collections --------------------------------------------------------------

ID_CHARS_MAX = 253  # job, node and label key: a Kubernetes DNS subdomain name
QUEUE_ID_CHARS_MAX = 63  # a DNS label, as the contract's queue id pattern says
MODULE_CHARS_MAX = 64  # a module name ("DLC", "DSW", "EAS")
USER_CHARS_MAX = 253  # a user name or e-mail address
LABEL_VALUE_CHARS_MAX = 4_096  # a label may carry a command line or an image reference
LABELS_MAX = 64  # labels or selector entries per node or job
MODULES_MAX = 64  # modules named by one preemption rule

# -- amounts (per task, per node capacity) ------------------------------------------------

# gpu in devices: far above any real node; in thousandths (1e7) a job of TASKS_MAX tasks is
# 1e12 and a million such nodes sum to 1e13, exact as a float and in int64.
GPU_MAX = 10_000
CPU_MAX = 10_000_000  # millicores: 10,000 cores on one node
MEMORY_MAX = 100_000_000  # MB: 100 TB on one node
TASKS_MAX = 100_000  # tasks of one gang; tasks x amount per task stays far below int64

# -- queues -------------------------------------------------------------------------------

# A queue's quota or limit may promise up to a million full nodes: gpu thousandths (1e13),
# millicores (1e13) and MB (1e14) all stay below 2**53, exact in fair-share arithmetic.
QUEUE_NODES_MAX = 1_000_000
QUEUE_AMOUNT_MAX: dict[str, int] = {
    "gpu": GPU_MAX * QUEUE_NODES_MAX,
    "cpu": CPU_MAX * QUEUE_NODES_MAX,
    "memory": MEMORY_MAX * QUEUE_NODES_MAX,
}
OVER_QUOTA_WEIGHT_MAX = 1_000_000  # weights are relative; sums of them stay finite floats
QUEUE_PRIORITY_MAX = 1_000_000  # over-quota priority, either sign; only its order matters

# -- time -----------------------------------------------------------------------------------

# Milliseconds since the epoch up to 9999-12-31T23:59:59.999Z: every date a person can write;
# plus DURATION_S_MAX it is still ~3e4 times below int64.
TS_MAX = 253_402_300_799_999
# Any duration or timeout in seconds (duration_s, heartbeat_timeout_s, balance_timeout_s,
# aging_interval_s): about 31 years, so ts + duration stays exact.
DURATION_S_MAX = 1_000_000_000
# A Tick at least every minute: timers fire at most that late, and the scheduler notices a
# stop request within a tick. The minimum stays 1 ms, as before, so older journals decode.
TICK_MS_MIN = 1
TICK_MS_MAX = 60_000
# Nodes one NodesAlive record names: about 40 bytes each keeps a record far below Kafka's 1 MB.
NODES_ALIVE_MAX = 10_000
ATTEMPT_MAX = 2**31 - 1  # attempts count requeues of one job
RETRIES_MAX = 1_000  # max_retries of one job
AFTER_OK_MAX = 64  # jobs one job may wait for
DEVICES_MAX = 1_024  # GPU devices one node reports
EXIT_CODE_MIN = -(2**31)  # exit codes as the agent's platform reports them (32-bit)
EXIT_CODE_MAX = 2**31 - 1
EXIT_REASON_CHARS_MAX = 64  # a short reason with an outcome, e.g. a signal name


def clip(text: str, limit: int = ECHO_CHARS_MAX, *, counted: bool = True) -> str:
    """`text` itself when short, else its first `limit` characters (and how long it was)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)" if counted else f"{text[:limit]}..."
