from __future__ import annotations

from pathlib import Path

from hybrid_gateway.observability.journal import MmapJournal, journal_lines, leftover_journals


def test_append_swap_and_read_back(tmp_path: Path) -> None:
    journal = MmapJournal(tmp_path, "log", capacity=64)
    journal.append(b"one")
    journal.append(b"two")
    sealed = journal.swap(journal.prepare())
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
