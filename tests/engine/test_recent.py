"""The bounded per-request records of the echo and scripted engines."""

from __future__ import annotations

from realtime.engine.recent import RecentDict, RecentList


def test_recent_dict_forgets_the_oldest_key_and_keeps_updated_keys_in_place():
    counts: RecentDict[str, int] = RecentDict(limit=3)
    for key in "abc":
        counts[key] = 0
    counts["a"] = 5  # an update: no eviction, no reordering
    assert counts == {"a": 5, "b": 0, "c": 0}
    counts["d"] = 1
    assert counts == {"b": 0, "c": 0, "d": 1}
    assert list(counts) == ["b", "c", "d"]


def test_recent_list_keeps_the_last_items_and_compares_as_a_list():
    items: RecentList[int] = RecentList(limit=2)
    for n in range(5):
        items.append(n)
    assert items == [3, 4]
    assert items[-1] == 4 and len(items) == 2
