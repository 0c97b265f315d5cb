"""Embedding runs at a lower scheduling priority than serving (Linux: a nice value per thread), inherited by
the threads the embedding thread starts (onnxruntime's pool), and never raised."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

import pytest

from mneme.embedding import ModelHandle, background_priority

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="a nice value per thread is Linux's")


def nice_of_thread(fn: Callable[[], None]) -> list[int]:
    seen: list[int] = []

    def run() -> None:
        fn()
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        child = threading.Thread(target=lambda: seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
        child.start()
        child.join()

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return seen


def test_the_thread_and_the_threads_it_starts_run_at_the_nice_value() -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    assert nice_of_thread(lambda: background_priority(max(base, 10))) == [max(base, 10)] * 2
    assert os.getpriority(os.PRIO_PROCESS, 0) == base  # the calling process (this thread) is untouched


def test_it_never_raises_a_priority() -> None:
    def lower_then_ask_less() -> None:
        background_priority(15)
        background_priority(5)

    assert nice_of_thread(lower_then_ask_less) == [max(15, os.getpriority(os.PRIO_PROCESS, 0))] * 2


def test_the_model_loads_at_its_nice_value() -> None:
    seen: list[int] = []

    class Fake:
        model_id, dim = "fake", 3

        def embed(self, texts: list[str]) -> list[list[float]]:
            return [[0.0, 0.0, 1.0] for _ in texts]

    def factory() -> Fake:
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        return Fake()

    handle = ModelHandle("fake", factory=factory, nice=12).start()
    assert handle.wait(10)
    assert seen == [max(12, os.getpriority(os.PRIO_PROCESS, 0))]
