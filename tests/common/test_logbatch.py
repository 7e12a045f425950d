"""Log lines of one event-loop turn, or of one interval, reach the stream in one write, in
order; a warning, a line logged outside a loop, and exit never wait."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import subprocess
import sys

from common.logbatch import BatchingStreamHandler
from common.logsetup import configure_logging, log_fields


class CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def logger_to(stream: CountingStream, *, interval: float = 0.0) -> logging.Logger:
    handler = BatchingStreamHandler(stream, interval=interval)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logging.getLogger(f"test.logbatch.{id(stream)}")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger


async def test_one_turns_lines_are_one_write_and_a_warning_goes_at_once() -> None:
    stream = CountingStream()
    log = logger_to(stream)
    for i in range(5):
        log.info("line %d", i)
    assert stream.getvalue() == ""  # still this turn
    await asyncio.sleep(0)  # the turn ends
    assert stream.getvalue() == "".join(f"INFO line {i}\n" for i in range(5))
    assert stream.writes == 1
    log.info("before")
    log.warning("now")
    assert stream.getvalue().endswith("INFO before\nWARNING now\n")  # nothing waits on it


def test_without_a_loop_each_line_is_written_at_once() -> None:
    stream = CountingStream()
    logger_to(stream).info("alone")
    assert stream.getvalue() == "INFO alone\n"


def test_what_is_pending_at_exit_is_written() -> None:
    code = (
        "import asyncio, logging\n"
        "from common.logsetup import configure_logging\n"
        "configure_logging('info', 'json')\n"
        "async def main():\n"
        "    logging.getLogger('x').info('last words', extra={'n': 1})\n"
        "    raise SystemExit(0)\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    line = json.loads(done.stderr.strip().splitlines()[-1])
    assert (line["msg"], line["n"], line["logger"]) == ("last words", 1, "x")


def test_json_lines_keep_their_fields_and_non_json_values() -> None:
    stream = CountingStream()
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, logging.logThreads, logging.logProcesses)
    try:
        configure_logging("info", "json")
        handler = root.handlers[0]
        assert isinstance(handler, BatchingStreamHandler)
        handler.setStream(stream)
        extra = {"big": 2**70, "path": sys.path[:0], "obj": object}
        logging.getLogger("y").info("hi", extra=extra)
    finally:
        root.handlers[:], level, logging.logThreads, logging.logProcesses = saved
        root.setLevel(level)
    doc = json.loads(stream.getvalue())
    assert doc["big"] == 2**70 and doc["path"] == [] and doc["obj"] == str(object)


def test_a_field_line_is_the_line_a_record_would_be() -> None:
    """log_fields writes directly only where that is invisible: same JSON as a record."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, logging.logThreads, logging.logProcesses)
    direct, via_record = CountingStream(), CountingStream()
    try:
        configure_logging("info", "json")
        handler = root.handlers[0]
        handler.setStream(direct)
        fields = {"uid": "u-1", "patch_ops": 12, "dry_run": False, "latency_ms": 0.25}
        log_fields(logging.getLogger("webhook.access"), "admission", fields)
        handler.flush()
        handler.setStream(via_record)
        logging.getLogger("webhook.access").info("admission", extra=fields)
        handler.flush()
    finally:
        root.handlers[:], level, logging.logThreads, logging.logProcesses = saved
        root.setLevel(level)
    one, two = json.loads(direct.getvalue()), json.loads(via_record.getvalue())
    assert one.pop("ts")[:16] == two.pop("ts")[:16]  # the same minute
    assert one == two == {"level": "info", "logger": "webhook.access", "msg": "admission", **fields}


class WatchedStream(CountingStream):
    """Sets `written` on each write (the loop that waits on it must be running)."""

    def __init__(self) -> None:
        super().__init__()
        self.written: asyncio.Event | None = None

    async def wait_written(self) -> None:
        self.written = asyncio.Event()
        async with asyncio.timeout(5):
            await self.written.wait()

    def write(self, text: str) -> int:
        if self.written is not None:
            self.written.set()
        return super().write(text)


async def test_an_interval_writes_the_lines_of_many_turns_at_once() -> None:
    stream = WatchedStream()
    log = logger_to(stream, interval=0.05)
    for i in range(3):
        log.info("turn %d", i)
        await asyncio.sleep(0)  # one turn each
    assert stream.getvalue() == ""  # the interval is not over
    await stream.wait_written()
    assert stream.getvalue() == "".join(f"INFO turn {i}\n" for i in range(3))
    assert stream.writes == 1


def test_lines_kept_for_a_loop_that_ended_go_out_with_the_next_loops() -> None:
    stream = WatchedStream()
    log = logger_to(stream, interval=0.05)

    async def first() -> None:
        log.info("first")  # its loop ends before the interval does

    async def second() -> None:
        log.info("second")
        await stream.wait_written()

    asyncio.run(first())
    assert stream.getvalue() == ""
    asyncio.run(second())
    assert stream.getvalue() == "INFO first\nINFO second\n"


async def test_a_line_that_cannot_be_rendered_is_written_as_its_value() -> None:
    stream = CountingStream()
    handler = BatchingStreamHandler(stream)

    def broken(value: object) -> str:
        raise ValueError("no")

    handler.write_later(broken, ("kept", 1))
    handler.write_later(lambda value: f"fine {value}", 2)
    await asyncio.sleep(0)
    assert stream.getvalue() == "('kept', 1)\nfine 2\n"


async def test_lines_render_at_the_end_of_their_turn_and_wait_only_for_room() -> None:
    """With an interval, a turn's lines are rendered as the turn ends (never hundreds at
    once, which would stall the request that comes next), and written once `max_chars`
    wait, without waiting for the interval."""
    stream = CountingStream()
    handler = BatchingStreamHandler(stream, interval=60, max_chars=100)
    rendered: list[int] = []

    def render(value: int) -> str:
        rendered.append(value)
        return f"line {value:02d}"

    handler.write_later(render, 0)
    assert rendered == []  # not on the request's path
    await asyncio.sleep(0)
    assert rendered == [0] and stream.getvalue() == ""  # rendered; 7 characters wait
    for i in range(1, 20):
        handler.write_later(render, i)
    await asyncio.sleep(0)
    assert stream.writes == 1  # past 100 characters: written at the turn's end
    assert stream.getvalue() == "".join(f"line {i:02d}\n" for i in range(20))
