"""kombu's filesystem transport (the broker of ``make run`` without Redis), with each message
written whole before it can be seen.

kombu's own ``_put`` opens the message file under its final name and then writes it; a worker
polling the folder can move and read the file in between, read nothing, and stop with
``JSONDecodeError`` (seen in the demo). Here the message is written under a name the reader
skips (``<queue>.msg.part``) and renamed into place, which is atomic on one filesystem.
Development only: production uses Redis.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    # kombu's filesystem Channel already differs from its base here; this matches it.
    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = final + ".part"
        try:
            with open(partial, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel
