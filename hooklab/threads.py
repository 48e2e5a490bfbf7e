"""How many PyTorch CPU threads hooklab's work uses, on the process's main thread and off it.

JupyterLab 4.4+ hands widget messages to a kernel *subshell* when the kernel offers them (ipykernel 7 does): a
live panel's callback then runs in a thread of its own that lives as long as the kernel. PyTorch work on more
than one thread from such a second thread makes every later parallel PyTorch call of the whole process, the
main thread's too, about twice as slow (this machine's OpenMP, libgomp; ``python3 dev.py bench`` measures it).
So off the main thread, hooklab keeps the thread at one PyTorch thread, for good.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Iterator

import torch

__all__ = ["one_thread_off_main", "threads"]


def one_thread_off_main() -> None:
    """Off the main thread, set this thread to one PyTorch thread, for good; on it, nothing. Call it in
    each such thread: one started later may begin with more (:func:`threads` sets the number back)."""
    if threading.current_thread() is not threading.main_thread() and torch.get_num_threads() != 1:
        torch.set_num_threads(1)


@contextmanager
def threads(n: int | None) -> Iterator[None]:
    """The block with ``n`` PyTorch threads (``None``: as set; at most the CPU count), then the number
    before; off the main thread, one, kept (:func:`one_thread_off_main`). A fixed number of threads
    makes float sums add up in the same order on every run.

    >>> with threads(1):
    ...     torch.get_num_threads()
    1
    """
    if threading.current_thread() is not threading.main_thread():
        one_thread_off_main()
        yield
        return
    before = torch.get_num_threads()
    if n is not None and n != before:
        torch.set_num_threads(max(1, min(n, os.cpu_count() or 1)))
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)
