"""A bounded message channel over a Unix stream socket: one JSON object per line, file descriptors alongside.

Both ends treat what they receive as untrusted: a line longer than ``MAX_MESSAGE`` or a descriptor nobody
asked for is an error (``ChannelError``), never a bigger buffer. Descriptors arrive with the line they were sent
with (SCM_RIGHTS); every one the receiver did not take is closed.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import socket
import time
from typing import Any

MAX_MESSAGE = 4 * 1024 * 1024  # a final report with 100k timing samples fits; nothing legitimate comes close
MAX_FDS = 2
_CHUNK = 1 << 16


class ChannelError(RuntimeError):
    """The peer broke the protocol (oversized line, not JSON, unexpected descriptors)."""


class ChannelClosed(ChannelError):
    """The peer closed its end (it exited, or was killed)."""


class Channel:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.fds: list[int] = []

    @classmethod
    def from_fd(cls, fd: int) -> Channel:
        return cls(socket.socket(fileno=fd))

    def send(self, message: dict[str, Any], fds: list[int] | None = None) -> None:
        data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        if len(data) > MAX_MESSAGE:
            raise ChannelError(f"message of {len(data)} bytes exceeds {MAX_MESSAGE}")
        self.sock.settimeout(None)
        if fds:
            sent = socket.send_fds(self.sock, [data], fds)
            data = data[sent:]
        if data:
            self.sock.sendall(data)

    def recv(self, timeout: float | None = None) -> tuple[dict[str, Any], list[int]]:
        """The next message and the descriptors that came with it; TimeoutError after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.buffer:
            if len(self.buffer) > MAX_MESSAGE:
                self.close_fds()
                raise ChannelError(f"message longer than {MAX_MESSAGE} bytes")
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError
            self.sock.settimeout(left)
            data, fds = self._read()
            if not data and not fds:
                self.close_fds()
                raise ChannelClosed("the other end closed the channel")
            self.buffer += data
            self.fds += fds
            if len(self.fds) > MAX_FDS:
                self.close_fds()
                raise ChannelError("more file descriptors than the protocol passes")
        line, _, rest = bytes(self.buffer).partition(b"\n")
        self.buffer = bytearray(rest)
        if len(line) > MAX_MESSAGE:
            self.close_fds()
            raise ChannelError(f"message longer than {MAX_MESSAGE} bytes")
        fds, self.fds = self.fds, []
        try:
            message = json.loads(line)
        except ValueError:
            close_fds(fds)
            raise ChannelError("message is not JSON") from None
        if not isinstance(message, dict):
            close_fds(fds)
            raise ChannelError("message is not a JSON object")
        return message, fds

    def _read(self) -> tuple[bytes, list[int]]:
        fds = array.array("i")
        data, ancdata, flags, _ = self.sock.recvmsg(_CHUNK, socket.CMSG_SPACE(MAX_FDS * fds.itemsize))
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        received = list(fds)
        if flags & socket.MSG_CTRUNC:
            close_fds(received)
            raise ChannelError("more file descriptors than the protocol passes")
        return data, received

    def close_fds(self) -> None:
        close_fds(self.fds)
        self.fds = []

    def close(self) -> None:
        self.close_fds()
        self.sock.close()


def close_fds(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
