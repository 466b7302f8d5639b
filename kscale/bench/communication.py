"""How long a step spends communicating, from a trace of the run: Horovod's timeline for Horovod, TensorFlow's
profiler for the workers of a `MultiWorkerMirroredStrategy`.

TensorFlow writes a profile (`tf.profiler.experimental.start/stop`) as an XSpace protocol buffer, the
`*.xplane.pb` that TensorBoard's profile plugin reads. Its message class is not public API
(kscale._tensorflow_private.xplane_pb2; tests/bench/test_communication.py fails when an upgrade moves
it). A collective (CollectiveReduceV2 and the other V2 collectives) starts with a
`CollectiveOpV2Kernel::Run` event that produces a context id and ends with the
`CollectiveExecutor::ExecuteAsync::Done` event that consumes it; the span between them is the collective
in flight (its wait for the other workers included, as a step feels it).
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any

from kscale import _tensorflow_private

#: The events that open and close one collective, linked by the context id in their `_p` / `_c` stats.
LAUNCH, DONE = "CollectiveOpV2Kernel::Run", "CollectiveExecutor::ExecuteAsync::Done"


def covered_seconds(spans: list[tuple[float, float]]) -> float:
    """The length of the union of (start, end) spans: time during which at least one was open."""
    covered, end = 0.0, float("-inf")
    for start, stop in sorted(spans):
        if stop > end:
            covered += stop - max(start, end)
            end = stop
    return covered


def allreduce_seconds(path: str) -> float:
    """Wall time during which any allreduce was in flight on this rank, from a Horovod timeline (Chrome
    trace events, one `pid` per tensor; an ALLREDUCE activity spans fusion-buffer copies and the
    transfer). Negotiation, where a tensor waits for the other ranks to be ready, is not counted."""
    with open(path) as f:
        text = f.read().rstrip().rstrip(",")
    events = json.loads(text if text.endswith("]") else text + "]")
    open_spans: dict[Any, list[tuple[str, float]]] = {}
    spans: list[tuple[float, float]] = []
    for event in events:
        pid, phase = event.get("pid"), event.get("ph")
        if phase == "B":
            open_spans.setdefault(pid, []).append((event.get("name", ""), event["ts"]))
        elif phase == "E" and open_spans.get(pid):
            name, start = open_spans[pid].pop()
            if name == "ALLREDUCE":
                spans.append((start, event["ts"]))
    return covered_seconds(spans) / 1e6


def profile_file(folder: str) -> str | None:
    """The XSpace file `tf.profiler.experimental.stop()` wrote under `folder` (None if there is none)."""
    found = sorted(glob.glob(os.path.join(folder, "plugins", "profile", "*", "*.xplane.pb")))
    return found[-1] if found else None


def collective_spans(path: str) -> list[tuple[float, float]]:
    """(start, end) seconds of every collective in the profile's host plane, launch to completion."""
    space = _tensorflow_private.xplane_pb2().XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    launched: dict[int, float] = {}
    done: dict[int, float] = {}
    for plane in space.planes:
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        stat_names = {key: meta.name for key, meta in plane.stat_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                name = names.get(event.metadata_id)
                if name not in (LAUNCH, DONE):
                    continue
                context = _context_id(event, stat_names, "_p" if name == LAUNCH else "_c")
                if context is None:
                    continue
                start_ps = line.timestamp_ns * 1000 + event.offset_ps
                if name == LAUNCH:
                    launched[context] = start_ps / 1e12
                else:
                    done[context] = (start_ps + event.duration_ps) / 1e12
    return sorted((launched[c], done[c]) for c in launched.keys() & done.keys())


def _context_id(event: Any, stat_names: dict[int, str], stat: str) -> int | None:
    """The event's producer (`_p`) or consumer (`_c`) context id, which links a launch to its completion."""
    return next(
        (s.uint64_value or s.int64_value for s in event.stats if stat_names.get(s.metadata_id) == stat), None
    )


def collective_seconds(folder: str) -> float | None:
    """Wall time during which any collective was in flight in the profile under `folder` (None: no
    profile was written, or it holds no collective)."""
    path = profile_file(folder)
    if path is None:
        return None
    spans = collective_spans(path)
    return covered_seconds(spans) if spans else None
