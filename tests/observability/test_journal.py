from __future__ import annotations

from pathlib import Path

from hybrid_gateway.observability.journal import MmapJournal, journal_lines, leftover_journals


def test_append_swap_and_read_back(tmp_path: Path) -> None:
    journal = MmapJournal(tmp_path, "log", capacity=64)
    journal.append(b"one")
    journal.append(b"two")
    sealed = journal.detach(journal.prepare()).seal()
    assert len(sealed) == 1 and journal_lines(sealed[0]) == [b"one", b"two"]
    assert sealed[0].stat().st_size == len(b"one\ntwo\n")  # the zero tail is cut when sealed
    journal.append(b"three")
    rest = journal.close()
    assert [journal_lines(p) for p in rest] == [[b"three"]]


def test_a_full_segment_rolls_over(tmp_path: Path) -> None:
    journal = MmapJournal(tmp_path, "log", capacity=16)
    for i in range(10):
        journal.append(f"record-{i}".encode())  # 9 bytes + newline: one per segment
    sealed = journal.close()
    assert [line for p in sealed for line in journal_lines(p)] == [
        f"record-{i}".encode() for i in range(10)
    ]
    big = MmapJournal(tmp_path, "big", capacity=16)
    big.append(b"x" * 100)  # bigger than a segment: gets a segment of its own size
    assert journal_lines(big.close()[-1]) == [b"x" * 100]


def test_leftovers_exclude_files_held_by_a_live_journal(tmp_path: Path) -> None:
    live = MmapJournal(tmp_path, "log", capacity=64)
    live.append(b"mine")
    dead = tmp_path / "log.journal.12345.1"
    dead.write_bytes(b"theirs\n")
    assert list(leftover_journals(tmp_path, "log")) == [dead]
    live.close()


def test_detach_continues_at_once_and_seals_later(tmp_path: Path) -> None:
    journal = MmapJournal(tmp_path, "log", capacity=64)
    journal.append(b"one")
    retired = journal.detach(journal.prepare())
    journal.append(b"two")  # into the fresh segment, before the old one is sealed
    (old,) = retired.segments
    assert old.path.stat().st_size == 64  # not sealed yet: no file work on the writers' path
    sealed = retired.seal()
    assert [journal_lines(p) for p in sealed] == [[b"one"]] and sealed[0].stat().st_size == 4
    assert [journal_lines(p) for p in journal.close()] == [[b"two"]]


def test_a_full_segment_is_sealed_by_the_next_detach_not_by_append(tmp_path: Path) -> None:
    journal = MmapJournal(tmp_path, "log", capacity=16)
    journal.append(b"record-0")
    journal.append(b"record-1")  # rolls over: record-0's segment waits, unsealed
    assert sorted(p.stat().st_size for p in tmp_path.iterdir()) == [16, 16]
    retired = journal.detach(journal.prepare())
    assert [journal_lines(p) for p in retired.seal()] == [[b"record-0"], [b"record-1"]]


def test_a_fresh_segment_reads_as_empty(tmp_path: Path) -> None:
    journal = MmapJournal(tmp_path, "log", capacity=4096)
    (path,) = tmp_path.iterdir()  # what a crash right after opening would leave
    assert journal_lines(path) == []
    journal.append(b"x")
    assert journal_lines(path) == [b"x"]
    journal.close()
