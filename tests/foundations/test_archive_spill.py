"""mirror.archive.spill: the same answers in memory and on disk, in the tree hash's order, nothing
left behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mirror.archive import spill
from mirror.archive.spill import FileList, SpillMap

KEYS = ["b", "a/b", "a", "é", "z", "\U0001f600", "A", "a b"]


@pytest.mark.parametrize("spill_at", [100, 2])
def test_a_map_answers_alike_in_memory_and_on_disk(spill_at: int) -> None:
    with SpillMap(spill_at) as table:
        for n, key in enumerate(KEYS):
            table[key] = str(n)
        assert len(table) == len(KEYS)
        assert table.get("a") == "2" and table.get("missing") is None
        assert "é" in table and "missing" not in table and 3 not in table
        table["a"] = "again"
        assert table.get("a") == "again" and len(table) == len(KEYS)
        assert table.setdefault("a", "other") == "again"
        assert table.setdefault("new", "fresh") == "fresh" and table.get("new") == "fresh"
        assert table.add("new") is False and table.add("newer") is True
        assert table.has_prefix("a/") and table.has_prefix("\U0001f600")
        assert not table.has_prefix("b/") and not table.has_prefix("zz")
        assert [k for k, _ in table.sorted_items()] == sorted(
            [*KEYS, "new", "newer"], key=lambda k: k.encode()
        )
        table.update([("a", "u"), ("brand", "n"), ("brand", "m")])
        assert len(table) == len(KEYS) + 3
        assert table.get_many(["a", "brand", "missing", "z"]) == {"a": "u", "brand": "m", "z": "4"}
        table.insert([("fresh", "f"), ("fresher", "g")])
        assert len(table) == len(KEYS) + 5 and table.get_many(["fresh"]) == {"fresh": "f"}


def test_a_map_moves_to_disk_past_its_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spill, "SPILL_AT", 3)
    with SpillMap() as table:
        for key in "abc":
            table.add(key)
        assert table._db is None
        table.add("d")
        assert table._db is not None and table._memory is None
        assert [k for k, _ in table.sorted_items()] == ["a", "b", "c", "d"]


def test_a_file_list_keeps_its_order_and_leaves_nothing(tmp_path: Path) -> None:
    entries = [("z.html", 3, "0" * 64), ("a b/c.html", 0, "f" * 64), ("é.css", 12, "1" * 64)]
    with FileList(str(tmp_path)) as files:
        files.extend(entries)
        assert list(files) == entries and list(files) == entries  # read as often as asked
        assert len(files) == 3
        assert os.listdir(tmp_path) == []  # nameless
        with pytest.raises(ValueError, match="line break"):
            files.append("a\nb", 1, "0" * 64)
        assert list(files) == entries


def test_a_file_list_appended_to_after_a_read_goes_on_at_its_end(tmp_path: Path) -> None:
    """Appends are buffered (no seek, which flushes, between two of them); one after a read,
    whole or stopped early, still lands after the last entry."""
    entries = [(f"p/{n}.html", n, f"{n:064x}") for n in range(2_000)]
    with FileList(str(tmp_path)) as files:
        files.extend(entries[:1_000])
        assert list(files) == entries[:1_000]
        files.extend(entries[1_000:1_500])
        assert next(iter(files)) == entries[0]
        files.extend(entries[1_500:])
        assert list(files) == entries


def test_batches_carry_on_on_disk_once_the_map_moved_there() -> None:
    with SpillMap(3) as table:
        table.update([("a", "1"), ("b", "2"), ("c", "3"), ("d", "4"), ("a", "5"), ("e", "6")])
        assert table._memory is None and len(table) == 5
        assert table.get_many("abcdex") == {"a": "5", "b": "2", "c": "3", "d": "4", "e": "6"}
    with SpillMap(1) as table:
        table.insert([("x", "1"), ("y", "2"), ("z", "3")])
        assert table._memory is None and len(table) == 3
        assert [value for _, value in table.sorted_items()] == ["1", "2", "3"]


def test_on_disk_a_new_or_absent_key_costs_no_statement_of_its_own() -> None:
    """The Bloom filter and the buffer of new keys (module docstring): statements are
    counted with SQLite's own trace hook."""
    statements: list[str] = []
    with SpillMap(10) as table:
        for n in range(11):
            table.add(f"seed/{n}")
        assert table._db is not None
        table._db.set_trace_callback(statements.append)
        for n in range(1000):
            assert table.get(f"absent/{n}") is None
            assert f"absent/{n}" not in table
        for n in range(spill._PENDING - 1):
            assert table.add(f"new/{n}") is True
        assert len(statements) < 20  # a few false answers of the filter, nothing a key
        statements.clear()
        assert table.add(f"new/{spill._PENDING}") is True  # the buffer is full: one batch
        assert statements and all(s.startswith("INSERT INTO m") for s in statements)
        assert table.get("new/7") == "" and table.get("seed/3") == ""


def test_on_disk_the_map_answers_as_a_dict_does() -> None:
    """Thousands of mixed operations past the spill, each answered as a dict answers it."""
    import random

    rng = random.Random(7)
    model: dict[str, str] = {}
    with SpillMap(50) as table:
        for step in range(20_000):
            key, value = f"k{rng.randrange(3000)}", str(step)
            what = rng.randrange(6)
            if what == 0:
                table[key] = value
                model[key] = value
            elif what == 1:
                assert table.setdefault(key, value) == model.setdefault(key, value)
            elif what == 2:
                assert table.get(key) == model.get(key)
            elif what == 3:
                assert (key in table) == (key in model)
            elif what == 4 and step % 97 == 0:
                batch = [(f"k{rng.randrange(3000)}", value) for _ in range(30)]
                table.update(batch)
                model.update(batch)
            elif what == 5 and step % 89 == 0:
                prefix = f"k{rng.randrange(30)}"
                assert table.has_prefix(prefix) == any(k.startswith(prefix) for k in model)
            assert len(table) == len(model)
        assert table._db is not None
        assert list(table.sorted_items()) == sorted(model.items(), key=lambda kv: kv[0].encode())
        assert table.get_many(list(model)[:700]) == {k: model[k] for k in list(model)[:700]}


@pytest.mark.parametrize("spill_at", [100, 0])
def test_a_key_with_a_lone_surrogate_is_a_key_as_in_a_dict(
    spill_at: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A str key need not be valid UTF-8 (a lone surrogate, as `surrogateescape` decodes a
    byte): the map holds it as a dict does, in memory and on disk. On disk a new key waits
    in the buffer: it must not fail later, at another key's write, nor leave every later
    statement failing."""
    monkeypatch.setattr(spill, "_PENDING", 2)
    odd = ["\udcff", "a\udc80b", "a"]
    with SpillMap(spill_at) as table:
        for n, key in enumerate(odd):
            table[key] = str(n)
        table.add("b")  # the buffer is written here
        assert [table.get(key) for key in odd] == ["0", "1", "2"]
        assert table.get_many([*odd, "c"]) == {"\udcff": "0", "a\udc80b": "1", "a": "2"}
        assert table.has_prefix("a\udc80") and not table.has_prefix("\udc80")
        order = sorted([*odd, "b"], key=lambda k: k.encode("utf-8", "surrogatepass"))
        assert [key for key, _ in table.sorted_items()] == order
        table.update([("\udcff", "u")])
        assert table.get("\udcff") == "u" and len(table) == 4
