"""Summarise py-spy's raw (collapsed) stacks: where a process spent its CPU, by kind.

Each line of py-spy's ``--format raw`` output is ``frame;frame;…;leaf N``, root
first, frames as ``function (file:line)``; N samples of that stack. Idle
threads (an event loop waiting in epoll) are not sampled, so the samples are
CPU time. A sample's *self* kind is that of its leaf frame; a kind's
*inclusive* share counts the samples with any frame of that kind (asyncpg
inclusive: the time under SQL client calls, encoding and decoding included).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

#: (kind, substrings of a frame's file) — first match wins, most specific first.
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("grpc", ("grpc/", "grpc_", "cygrpc")),
    ("protobuf", ("google/protobuf",)),
    ("sql_client", ("asyncpg/",)),
    ("redis_client", ("redis/",)),
    ("json", ("json/",)),
    ("cel", ("celpy/", "lark/")),
    ("telemetry", ("opentelemetry/",)),
    ("logging", ("logging/",)),
    ("pydantic", ("pydantic",)),
    ("http", ("aiohttp/", "multidict/", "yarl/")),
    ("composer", ("composer_",)),
    ("event_loop", ("asyncio/", "uvloop", "selectors.py")),
)
_FRAME = re.compile(r"^(?P<fn>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


@dataclass
class Profile:
    samples: int
    self_share: dict[str, float]
    inclusive_share: dict[str, float]
    top: list[tuple[str, float]]


def kind_of(file: str) -> str:
    for kind, needles in KINDS:
        if any(n in file for n in needles):
            return kind
    return "other"


def _frames(stack: str) -> list[tuple[str, str]]:
    out = []
    for frame in stack.split(";"):
        m = _FRAME.match(frame.strip())
        if m is None:
            out.append((frame.strip(), ""))
        else:
            out.append((m["fn"], m["file"]))
    return out


def summarise(path: Path, top: int = 12) -> Profile:
    self_counts: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        n = int(count_text)
        frames = [f for f in _frames(stack) if f[1]]  # drop process/thread pseudo-frames
        if not frames:
            continue
        total += n
        fn, file = frames[-1]
        self_counts[kind_of(file)] += n
        leaves[f"{fn} ({file.rsplit('site-packages/', 1)[-1]})"] += n
        for kind in {kind_of(f) for _, f in frames}:
            inclusive[kind] += n
    if total == 0:
        return Profile(0, {}, {}, [])
    return Profile(
        total,
        {k: v / total for k, v in self_counts.most_common()},
        {k: v / total for k, v in inclusive.most_common()},
        [(k, v / total) for k, v in leaves.most_common(top)],
    )


def render(name: str, p: Profile, cpu_ms_per_step: float | None) -> str:
    per_step = f", {cpu_ms_per_step:.2f} ms CPU per step" if cpu_ms_per_step is not None else ""
    lines = [f"-- {name}: {p.samples} samples{per_step}"]
    lines.append(
        "   self:      " + ", ".join(f"{k} {v:.0%}" for k, v in p.self_share.items() if v >= 0.01)
    )
    lines.append(
        "   inclusive: "
        + ", ".join(
            f"{k} {v:.0%}"
            for k, v in p.inclusive_share.items()
            if v >= 0.02 and k not in ("event_loop", "other")
        )
    )
    lines += [f"   {share:5.1%}  {leaf}" for leaf, share in p.top]
    return "\n".join(lines)
