"""The wire format has one home (opgen/score/jail/wire.py, which the worker imports as a script's
package and so cannot import opgen): what one end encodes, the other decodes, both ends use one set
of caps, and the grading processes (opgen/score/batch.py) use the same framing."""

from __future__ import annotations

import marshal
import os
import struct
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from opgen.score import batch as B
from opgen.score import sandbox as S
from opgen.score.jail import steps, wire
from opgen.score.jail.worker import Worker


def test_the_bytes_on_the_wire():
    # The frame and message layouts, byte for byte (what the hostile tests forge by hand).
    assert wire.encode_frame("ok", 7, "hé") == b"\x01" + b"\x00\x00\x00\x07" + b"\x00\x00\x00\x03" + "hé".encode()
    assert wire.encode_frame("loaded", 1, "0") == struct.pack(">BII", 0, 1, 1) + b"0"
    assert wire.FRAME_HEADER.size == 9 and wire.HEADER.size == 8
    message = wire.encode(wire.Hello({"seccomp": True}, 42).to_wire())
    assert message[:8] == struct.pack(">Q", len(message) - 8)
    assert marshal.loads(message[8:]) == ("hello", {"seccomp": True}, 42)
    request = wire.Request([("c", [("f", ("a",))], False)], 2.0, 4.0)
    assert request.to_wire() == ([("c", [("f", ("a",))], False)], 2.0, 4.0)
    back = wire.Request.from_wire(marshal.loads(marshal.dumps(request.to_wire())))
    assert (back.units, back.timeout_s, back.budget_s, back.calls()) == (request.units, 2.0, 4.0, 1)
    with pytest.raises(ValueError, match="hello"):
        wire.Hello.from_wire(("hello", {}))


def test_one_framing_for_every_message_in_score():
    # The grading processes' messages are the same frames; neither batch.py nor sandbox.py keeps a
    # copy of the layout or a reader of its own.
    for module in (B, S):
        text = Path(module.__file__).read_text(encoding="utf-8")
        for copy in ("import struct", '">I"', '"<Q"', '">Q"', '">BII"', "def _read_exact", "600", '"hello"'):
            assert copy not in text, (module.__name__, copy)


def test_one_set_of_caps_and_names():
    assert S.DETAIL_CAP is wire.DETAIL_CAP == 600
    assert S.STATUSES is wire.RESULTS and wire.STATUSES == ("loaded", *S.STATUSES)
    assert S.MECHANISMS == tuple(m.name for m in steps.MECHANISMS)
    assert S.WORKER == Path(wire.__file__).with_name("__main__.py")
    assert wire.reply_cap(3, 100) == 3 * (100 * 4 + 4 * 600 + 64) + 1024


def _pipe_worker(wfd: int, rfd: int) -> S._Worker:
    end = object.__new__(S._Worker)
    end.wfd, end.rfd, end.reader = wfd, rfd, wire.Reader()
    end.proc = SimpleNamespace(poll=lambda: None)
    return end


def test_a_request_the_scorer_sends_is_what_the_worker_reads():
    rfd, wfd = os.pipe()
    try:
        units = [(marshal.dumps(compile("x = 1", "<t>", "exec")), [("f", ("a", "b"))], True)]
        _pipe_worker(wfd, -1).send(wire.encode(wire.Request(units, 1.5, 3.0).to_wire()))
        got = wire.Request.from_wire(wire.receive(rfd))
        assert (got.units, got.timeout_s, got.budget_s) == (units, 1.5, 3.0)
    finally:
        os.close(rfd)
        os.close(wfd)


def test_a_reply_the_worker_sends_is_what_the_scorer_reads():
    rfd, wfd = os.pipe()
    try:
        reply = [("ok", "ABC", ""), ("exception", None, "ValueError: x")]
        wire.send(wfd, reply)
        assert _pipe_worker(-1, rfd).receive(5.0) == reply
        wire.send(wfd, reply)
        with pytest.raises(S.SandboxError, match="more than 10"):  # the scorer's cap, before reading
            _pipe_worker(-1, rfd).receive(5.0, max_bytes=10)
    finally:
        os.close(rfd)
        os.close(wfd)


def test_the_reader_takes_messages_split_anywhere():
    messages = [("a", 1), [1.5, None, b"x" * 70_000], {"k": "v"}]
    data = b"".join(wire.encode(m) for m in messages)
    for step in (1, 7, 4096):
        reader, got = wire.Reader(), []
        for i in range(0, len(data), step):
            reader.feed(data[i:i + step])
            while True:
                ok, payload = reader.take()
                if not ok:
                    break
                got.append(payload)
        assert got == messages and reader.size() is None
    reader = wire.Reader()
    reader.feed(wire.HEADER.pack(3) + b"\xff\xff\xff")
    with pytest.raises(ValueError, match="malformed"):
        reader.take()


def _read_frames(data: bytes, n_expected: int, max_output: int = 10, pid: int = 4242) -> list:
    units = [(None, [("f", ())] * n_expected, False)]
    rfd, wfd = os.pipe()
    zygote_r, zygote_w = os.pipe()  # the zygote's reports: none come
    request_r, request_w = os.pipe()
    worker = SimpleNamespace(limits={"max_output": max_output}, _unit_of=Worker._unit_of, res_r=rfd,
                             status_r=zygote_r, req_w=request_w, child_pid=pid, in_fresh=False)
    try:
        os.write(wfd, data)
        os.close(wfd)
        wfd = -1
        out: list = []
        Worker._frames(worker, units, n_expected, 5.0, out, set(), time.monotonic() + 5.0, b"")
        return out
    finally:
        for fd in (rfd, wfd, zygote_r, zygote_w, request_r, request_w):
            if fd >= 0:
                os.close(fd)


def test_frames_the_child_writes_are_what_the_worker_reads():
    data = (wire.encode_frame("loaded", 4242, "0") + wire.encode_frame("ok", 4242, "héllo")
            + wire.encode_frame("ok", 999, "forged by another pid") + wire.encode_frame("exception", 4242, "E" * 700)
            + wire.encode_frame("ok", 4242, "x" * 201) + wire.encode_frame("ok", 4242, "past the last call"))
    assert _read_frames(data, 3, max_output=200) == [("ok", "héllo", ""), ("exception", None, "E" * wire.DETAIL_CAP),
                                                     ("output_too_large", None, "201 characters > 200")]


def test_a_frame_past_the_cap_is_malformed():
    big = wire.FRAME_HEADER.pack(1, 4242, wire.frame_cap(10) + 1) + b"x" * (wire.frame_cap(10) + 1)
    assert _read_frames(big, 1) == [("output_too_large", None, "malformed result frame")]
    at_cap = wire.FRAME_HEADER.pack(5, 4242, wire.frame_cap(10)) + b"e" * wire.frame_cap(10)
    assert _read_frames(at_cap, 1) == [("exception", None, "e" * wire.frame_cap(10))]


def test_the_argv_the_scorer_builds_is_what_the_worker_reads():
    with pytest.warns(S.WeakSandboxWarning):  # no namespaces: below full, as asked
        box = S.Sandbox(workers=1, memory_mb=300, fsize_bytes=12345, nofile=50, nproc=6, max_output=777, work_mb=3,
                        work_inodes=99, namespaces=False, allow_weak_sandbox=True)
    with box:
        argv = box._argv[4:]
        assert box._argv[:4] == [S.sys.executable, "-I", "-S", str(S.WORKER)]
        assert wire.read_args([*argv, "/root-dir"]) == (
            {"as_bytes": 300 << 20, "fsize_bytes": 12345, "nofile": 50, "nproc": 6, "max_output": 777,
             "work_bytes": 3 << 20, "work_inodes": 99}, False, True, "/root-dir", [])
        # The worker read them back: its hello reports the limits it was given, every mechanism.
        assert box.isolation["nproc"] == 6 and box.isolation["work_bytes"] == 3 << 20
        assert box.isolation["limits"]["RLIMIT_NPROC"] == 6 and box.isolation["limits"]["RLIMIT_CORE"] == [0, 0]
        assert box.isolation["limits"]["RLIMIT_FSIZE"] == [12345, 12345]
        assert set(S.MECHANISMS) <= set(box.isolation)
        (r,) = box.run([S.Job("def f(x):\n    return x * 800\n", "f", ("a",))])
        assert (r.status, r.detail) == ("output_too_large", "800 characters > 777")
