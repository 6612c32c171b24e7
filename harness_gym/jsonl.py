"""Append-only JSON-lines files: the one format every resumable run (bench, audits, replication) keeps.

A run killed at any moment leaves at most one half-written last line, which :meth:`ResultsFile.repair`
drops; finished work is found again by key, so a rerun continues instead of starting over."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class ResultsFile:
    """An append-only JSON-lines file; thread-safe appends, each flushed and synced to disk."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()

    def repair(self) -> None:
        """Drop a half-written last line (the run was killed while writing it)."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            self.path.write_bytes(data[: data.rfind(b"\n") + 1])

    def done_keys(self) -> set[str]:
        keys = set()
        if self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if record.get("error") is None:
                    keys.add(record["episode_id"])
        return keys

    def append(self, record: Mapping[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, default=str) + "\n"
        with self.lock, open(self.path, "a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())


def load_records(path: str | Path) -> list[dict[str, Any]]:
    """Episode records from a results file (unreadable lines are skipped, errors kept)."""
    records = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records
