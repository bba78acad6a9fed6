"""`cache calibrate` writes the calibrated decision into the gateway config.

The decision written is exactly the one calibrated: a plain (cosine + guards) calibration
takes out a verifier and a reranker, a verifier calibration takes out a reranker, a reranker
calibration takes out a verifier; otherwise the gateway would run a combined rule nobody
measured (a verifier calibration sets ``threshold: -1``, so a leftover reranker would be asked
about every candidate).  The previous file is kept as ``NAME.bak-YYYYmmddHHMMSS`` and the new
one replaces it atomically (a temporary file in the same folder, then ``os.replace``), so a
failure part-way leaves the old config in place.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import yaml

Rule = Literal["plain", "verifier", "reranker"]

# the keys of the rules a calibration of each kind replaces
_REPLACED: dict[Rule, tuple[str, ...]] = {
    "plain": ("verifier", "verifier_threshold", "reranker"),
    "verifier": ("reranker",),
    "reranker": ("verifier", "verifier_threshold"),
}


def relative(model: Path, config: Path) -> str:
    """The model path as the config should name it (relative to the config's folder)."""
    return os.path.relpath(model.resolve(), config.resolve().parent)


def check_writable(config: Path) -> None:
    """Raise ``OSError`` (naming the config) unless the config, its backup and the temporary
    file can be written: checked before the slow part, not after it."""
    target = config.resolve()
    if not os.access(target, os.W_OK):
        raise OSError(errno.EACCES, "the config file is not writable", str(config))
    try:  # a real file in the folder: catches a read-only folder or file system, even for root
        fd, probe = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        why = f"cannot write in its folder ({exc.strerror})"
        raise OSError(exc.errno, why, str(config)) from None
    os.close(fd)
    os.unlink(probe)


def write_decision(config: Path, rule: Rule, update: Mapping[str, object]) -> Path:
    """Set ``update`` in ``cache.semantic``, drop the keys of the rules ``rule`` replaces, and
    write the file atomically; returns the backup of the previous file."""
    target = config.resolve()  # a symlinked config: write the file it points to
    data = yaml.safe_load(target.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise OSError(errno.EINVAL, "expected a YAML mapping", str(config))
    semantic = data.setdefault("cache", {}).setdefault("semantic", {})
    semantic.update(update)
    for key in _REPLACED[rule]:
        semantic.pop(key, None)
    backup = target.with_name(target.name + f".bak-{time.strftime('%Y%m%d%H%M%S')}")
    shutil.copy2(target, backup)
    _replace(target, yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return backup


def _replace(target: Path, text: str) -> None:
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        shutil.copymode(target, temporary)  # mkstemp makes it 0600
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
