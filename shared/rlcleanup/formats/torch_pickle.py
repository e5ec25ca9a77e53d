"""Read a value out of a torch.save'd file without unpickling it (the file comes from an untrusted run)."""

from __future__ import annotations

import io
import pickletools
import zipfile
from typing import Any

_PAYLOAD_CAP = 64 * 1024 * 1024
_PICKLE_STR_OPS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"}
_PICKLE_INT_OPS = {"BININT", "BININT1", "BININT2", "INT", "LONG", "LONG1", "LONG4"}
_PICKLE_MEMO_OPS = {"MEMOIZE", "BINPUT", "LONG_BINPUT", "PUT"}


def pickled_global_step(data: bytes) -> int | None:
    """The int stored under "global_step" in a torch.save'd dict, found by walking pickle opcodes.

    pickletools.genops only decodes opcodes, it never executes them: safe on untrusted trainer_state.pt.
    Handles the zip container (torch >= 1.6: `<name>/data.pkl`) and the legacy stream of pickles.
    """
    try:
        payload = data
        if data[:4] == b"PK\x03\x04":
            with zipfile.ZipFile(io.BytesIO(data)) as zf:
                member = next((i for i in zf.infolist() if i.filename.endswith("data.pkl")), None)
                if member is None or member.file_size > _PAYLOAD_CAP:
                    return None
                payload = zf.read(member)
        stream = io.BytesIO(payload)
        for _ in range(4):  # legacy format: magic, protocol, sys info, then the object
            previous: Any = None
            for op, arg, _pos in pickletools.genops(stream):
                if op.name in _PICKLE_MEMO_OPS:
                    continue
                if previous == "global_step" and op.name in _PICKLE_INT_OPS and isinstance(arg, int):
                    return arg
                previous = arg if op.name in _PICKLE_STR_OPS else None
            if stream.tell() >= len(payload):
                break
    except Exception:  # any decoding failure just means "not detectable"
        return None
    return None
