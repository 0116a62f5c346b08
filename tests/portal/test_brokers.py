"""The filesystem broker of ``make run`` without Redis: a message is invisible to a worker
until it is written whole (kombu's own transport let a worker read an empty file and stop)."""

from __future__ import annotations

import os
from pathlib import Path
from queue import Empty

import pytest
from kombu import Connection

from portal import brokers


def _channel(folder: Path):  # type: ignore[no-untyped-def]
    options = {
        "data_folder_in": str(folder),
        "data_folder_out": str(folder),
        "processed_folder": str(folder / "processed"),
        "control_folder": str(folder / "control"),
        "store_processed": False,
    }
    (folder / "processed").mkdir()
    (folder / "control").mkdir()
    connection = Connection(
        "filesystem://localhost/", transport="portal.brokers:Transport",
        transport_options=options,
    )  # fmt: skip
    return connection, connection.channel()


def test_a_message_is_invisible_until_written_whole(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    connection, channel = _channel(tmp_path)
    assert isinstance(channel, brokers.Channel)
    during: list[list[str]] = []
    rename = os.replace

    def spy(src: str, dst: str) -> None:
        # Written, not yet renamed: a polling worker finds nothing for the queue.
        during.append(sorted(os.listdir(tmp_path)))
        with pytest.raises(Empty):
            channel._get("jobs")
        assert Path(src).read_bytes()  # the whole message is already in the file
        rename(src, dst)

    monkeypatch.setattr(brokers.os, "replace", spy)
    channel._put("jobs", {"body": "hello", "n": 1})

    assert len(during) == 1 and any(name.endswith(".jobs.msg.part") for name in during[0])
    assert channel._get("jobs") == {"body": "hello", "n": 1}
    assert not [n for n in os.listdir(tmp_path) if n.endswith((".msg", ".part"))]
    connection.release()
