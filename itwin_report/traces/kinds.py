"""What each trace event is: the kinds of device events and CPU operators, by name, and the
profiler-step annotations (Holistic Trace Analysis's rules; one home for each).

Device events (kernels, copies): communication is NCCL (``ncclKernel_…``,
``ncclDevKernel_…``), RCCL (AMD, which keeps NCCL's names, or says ``rccl``) and HCCL (Intel
Gaudi / Ascend), where HTA's rule is ``^nccl.*Kernel``; memory is HTA's ``^Memcpy``, ``^Memset``
and ``^dma``; a name with ``Memcpy`` or ``Sync`` anywhere else in it (``Stream Sync``,
``SyncBatchNorm`` kernels, kernels named ``…Memcpy…``) is neither compute nor communication nor
memory in HTA either (OTHER: busy time all the same); the rest is compute.

CPU operators (a CPU-only, gloo trace): communication is gloo's, c10d's and the profiler's
comms records and names with a collective in them; memory is the copies between tensors; the
rest is compute.
"""

from __future__ import annotations

import re

# a rank's figures (the columns of analyze-traces), in seconds and in percent (0-100)
SECONDS = (
    "span_s",
    "compute_s",
    "communication_s",
    "memory_s",
    "idle_s",
    "exposed_communication_s",
)
PERCENTS = ("compute_pct", "non_compute_pct", "idle_pct", "overlap_pct")

# kinds of device events and CPU operators; OTHER: a device event HTA counts as neither compute
# nor communication nor memory (a synchronisation, a copy not named as one first)
COMPUTE, COMMUNICATION, MEMORY, OTHER = 0, 1, 2, 3
KIND_NAMES = ("compute", "communication", "memory", "other")

COMM_KERNEL = re.compile(r"(?i)^(?:nccl|rccl|hccl)")
MEMORY_KERNEL = re.compile(r"^(?:Memcpy|Memset|dma)")
NON_COMPUTE_KERNEL = re.compile(r"Memcpy|Sync")
# communication operators on CPU threads (gloo, c10d's dispatch, the profiler's comms record)
COMM_OPERATOR = re.compile(
    r"(?i)^(?:gloo:|nccl:|c10d::|record_param_comms)|all_?reduce|all_?gather|reduce_?scatter"
    r"|all_?to_?all|broadcast"
)
# memory operators on CPU threads (copies between tensors)
MEMORY_OPERATOR = re.compile(r"^aten::(?:copy_|_to_copy|to|contiguous|clone)$")
STEP_MARK = "ProfilerStep"  # a host event whose name contains this marks a step (HTA)
DEVICE_STEP = "gpu_user_annotation"  # the category of the device-side step annotation
STEP_NAME = re.compile(r"ProfilerStep\s*#\s*(\d+)")


def kernel_kind(name: str) -> int:
    """COMPUTE, COMMUNICATION, MEMORY or OTHER for a device event's name."""
    if COMM_KERNEL.match(name):
        return COMMUNICATION
    if MEMORY_KERNEL.match(name):
        return MEMORY
    return OTHER if NON_COMPUTE_KERNEL.search(name) else COMPUTE


def operator_kind(name: str) -> int:
    """COMPUTE, COMMUNICATION or MEMORY for a CPU operator's name."""
    if COMM_OPERATOR.search(name):
        return COMMUNICATION
    return MEMORY if MEMORY_OPERATOR.match(name) else COMPUTE


def step_number(name: str) -> int:
    """N of a ``ProfilerStep#N`` name, -1 when it has none."""
    match = STEP_NAME.search(name)
    return int(match.group(1)) if match else -1
