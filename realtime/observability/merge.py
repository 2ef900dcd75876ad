"""Several front ends' Prometheus expositions as one: what `/metrics` answers with
`--api-servers` above 1, whichever front end the scrape reached.

Each front end counts what it served; the sum is the server's. So samples with the
same name and labels are added up, with two exceptions: a counter's `_created`
timestamp is the earliest, and a family that reads the one engine's state (every
front end reports the same value: queue lengths, cache usage) is taken once, from
the first exposition. Families are kept in the first exposition's order; a sample
only a later one has is added to its family. Pure text in, text out: the
exposition format of `prometheus_client.generate_latest`, one sample per line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

#: Families every front end reads from the same engine, by name prefix: not added up.
ENGINE_STATE_PREFIXES = (
    "vllm:num_requests_",
    "vllm:kv_cache_usage",
    "vllm:gpu_cache_usage",
    "vllm:prefix_cache_",
    "realtime_engine_",
)


def is_engine_state(family: str) -> bool:
    return family.startswith(ENGINE_STATE_PREFIXES)


class _Family:
    __slots__ = ("comments", "name", "samples")

    def __init__(self, name: str) -> None:
        self.name = name
        self.comments: list[str] = []
        #: "name{labels}" -> value, in order of first appearance
        self.samples: dict[str, float] = {}


def merge_expositions(texts: Iterable[str], shared: Callable[[str], bool] = is_engine_state) -> str:
    families: dict[str, _Family] = {}
    for index, text in enumerate(texts):
        family: _Family | None = None
        for line in text.splitlines():
            if not line:
                continue
            if line.startswith("#"):
                parts = line.split(" ", 3)
                if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                    name = parts[2]
                    family = families.get(name)
                    if family is None:
                        family = families[name] = _Family(name)
                    if parts[1] == "HELP" or len(family.comments) < 2:
                        if line not in family.comments:
                            family.comments.append(line)
                continue
            if family is None:
                family = families.setdefault("", _Family(""))
            key, _, raw = line.rpartition(" ")
            value = float(raw)
            if key not in family.samples:
                family.samples[key] = value
            elif index == 0 or shared(family.name):
                continue
            elif key.split("{", 1)[0].endswith("_created"):
                family.samples[key] = min(family.samples[key], value)
            else:
                family.samples[key] += value
    lines: list[str] = []
    for family in families.values():
        lines.extend(family.comments)
        lines.extend(f"{key} {_number(value)}" for key, value in family.samples.items())
    return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    return repr(float(value))
