"""The local-directory backend: atomic, private, and robust to its directories changing."""

from __future__ import annotations

import itertools
import os
import shutil
import stat
from pathlib import Path

import pytest

import keel.activities.store.local as local
from keel.activities.store.local import LocalBackend

KEY = "msg/ab" + "c" * 62


def test_put_then_get_gives_the_bytes_back_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path)
    backend.put(KEY, b"hello")
    assert backend.get(KEY) == b"hello"
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert [p.relative_to(tmp_path).as_posix() for p in files] == [f"msg/ab/{KEY[4:]}"]
    assert stat.S_IMODE(files[0].stat().st_mode) == 0o600  # conversations are private


def test_an_existing_object_is_left_alone(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path)
    backend.put(KEY, b"first")
    backend.put(KEY, b"second")  # same key, same content in real use: never rewritten
    assert backend.get(KEY) == b"first"


def test_a_missing_object_is_a_key_error(tmp_path: Path) -> None:
    with pytest.raises(KeyError):
        LocalBackend(tmp_path).get(KEY)


def test_a_directory_removed_under_the_backend_is_made_again(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path)
    backend.put(KEY, b"one")
    shutil.rmtree(tmp_path / "msg")
    other = "msg/ab" + "d" * 62
    backend.put(other, b"two")
    assert backend.get(other) == b"two"


def test_a_stale_temporary_file_with_the_next_name_is_stepped_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = LocalBackend(tmp_path)
    backend.put("msg/ab" + "e" * 62, b"makes the directory")
    monkeypatch.setattr(local, "_TEMP_NAMES", itertools.count(1000))
    stale = tmp_path / "msg" / "ab" / f".tmp-{os.getpid()}-1000"
    stale.write_bytes(b"left by a dead process that had this pid")
    backend.put(KEY, b"payload")
    assert backend.get(KEY) == b"payload"
    assert stale.read_bytes().startswith(b"left by")  # not ours to overwrite
