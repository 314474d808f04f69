"""SGLang-format log output of the simulated node.

This module owns how the simulator writes: SGLang's logger format
(``[YYYY-MM-DD HH:MM:SS] message``, with `` TP<rank>`` in the brackets for scheduler ranks) on
standard error, where ``logging.basicConfig`` sends SGLang's records, and uvicorn's access lines
(``[time] INFO:     127.0.0.1:port - "POST /generate HTTP/1.1" 200 OK``) on standard output, where
uvicorn's access handler writes. Writes go straight to the file descriptors so they interleave in
order with a worker process's output and survive an abrupt exit.
"""

from __future__ import annotations

import os
import time
from http import HTTPStatus

__all__ = ["SimLog"]


class SimLog:
    """Writer of SGLang-style log lines.

    Args:
        out_fd: File descriptor for uvicorn access lines (standard output).
        err_fd: File descriptor for SGLang's log records (standard error).
        access_log: Whether to print access lines.
    """

    def __init__(self, *, out_fd: int = 1, err_fd: int = 2, access_log: bool = True) -> None:
        self.out_fd = out_fd
        self.err_fd = err_fd
        self.access_log = access_log

    @staticmethod
    def stamp() -> str:
        """The time stamp SGLang's formatter prints (``%Y-%m-%d %H:%M:%S``)."""
        return time.strftime("%Y-%m-%d %H:%M:%S")

    @staticmethod
    def _write(fd: int, text: str) -> None:
        data = text.encode("utf-8", "replace")
        while data:
            try:
                written = os.write(fd, data)
            except BlockingIOError:
                time.sleep(0.001)
                continue
            except OSError:
                return
            data = data[written:]

    def line(self, message: str, *, rank: int | None = None) -> None:
        """Write one SGLang log record to standard error.

        Args:
            message: The message (may span lines, e.g. a traceback).
            rank: TP rank for scheduler records (adds `` TP<rank>`` to the prefix).
        """
        prefix = f" TP{rank}" if rank is not None else ""
        self._write(self.err_fd, f"[{self.stamp()}{prefix}] {message}\n")

    def ranks(self, message: str, tp_size: int) -> None:
        """Write the same record once per TP rank (as every scheduler process logs it)."""
        for rank in range(tp_size):
            self.line(message, rank=rank)

    def raw(self, text: str, *, stderr: bool = True) -> None:
        """Write text as is (warnings module output, NCCL lines, C++ errors)."""
        self._write(self.err_fd if stderr else self.out_fd, text)

    def uvicorn(self, message: str) -> None:
        """A uvicorn lifecycle line (``[time] INFO:     Started server process [pid]``)."""
        self._write(self.err_fd, f"[{self.stamp()}] INFO:     {message}\n")

    def access(self, client: str, method: str, path: str, status: int) -> None:
        """A uvicorn access line on standard output."""
        if not self.access_log:
            return
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = ""
        self._write(
            self.out_fd,
            f'[{self.stamp()}] INFO:     {client} - "{method} {path} HTTP/1.1" {status} {phrase}\n',
        )
