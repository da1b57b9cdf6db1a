"""The sandbox's wire protocol has one home (opgen/score/worker.py, which runs as a script and so
cannot import opgen): what one end encodes, the other decodes, and both ends use one set of caps."""

from __future__ import annotations

import marshal
import os
import struct
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from opgen.score import sandbox as S
from opgen.score import worker as W


def test_the_bytes_on_the_wire():
    # The frame and message layouts, byte for byte (what the hostile tests forge by hand).
    assert W.encode_frame("ok", 7, "hé") == b"\x01" + b"\x00\x00\x00\x07" + b"\x00\x00\x00\x03" + "hé".encode()
    assert W.encode_frame("loaded", 1, "0") == struct.pack(">BII", 0, 1, 1) + b"0"
    assert W.FRAME_HEADER.size == 9 and W.MESSAGE_HEADER.size == 4
    message = W.encode_message((W.HELLO, {"seccomp": True}))
    assert message[:4] == struct.pack(">I", len(message) - 4)
    assert marshal.loads(message[4:]) == ("hello", {"seccomp": True})
    assert W.make_request([("c", [("f", ("a",))], False)], 2.0, 4.0) == ([("c", [("f", ("a",))], False)], 2.0, 4.0)
    assert W.read_request(([], 1.0)) == ([], 1.0, None)  # a request without a budget: the default


def test_one_set_of_caps_and_names():
    assert S.DETAIL_CAP is W.DETAIL_CAP == 600
    assert S.STATUSES is W.RESULTS and W.STATUSES == ("loaded", *S.STATUSES)
    assert S.MECHANISMS is W.MECHANISMS
    assert S.WORKER == Path(W.__file__)
    assert W.reply_cap(3, 100) == 3 * (100 * 4 + 4 * 600 + 64) + 1024
    # The scorer's end keeps no copy of the layouts.
    text = Path(S.__file__).read_text(encoding="utf-8")
    for copy in ("import struct", '">I"', '">BII"', "600", '"hello"'):
        assert copy not in text, copy


def _pipe_worker(wfd: int, rfd: int) -> S._Worker:
    end = object.__new__(S._Worker)
    end.wfd, end.rfd = wfd, rfd
    return end


def test_a_request_the_scorer_sends_is_what_the_worker_reads():
    rfd, wfd = os.pipe()
    try:
        units = [(marshal.dumps(compile("x = 1", "<t>", "exec")), [("f", ("a", "b"))], True)]
        _pipe_worker(wfd, -1).send(W.make_request(units, 1.5, 3.0))
        head = W._read_exact(rfd, W.MESSAGE_HEADER.size)
        body = W._read_exact(rfd, W.MESSAGE_HEADER.unpack(head)[0])
        assert W.read_request(marshal.loads(body)) == (units, 1.5, 3.0)
    finally:
        os.close(rfd)
        os.close(wfd)


def test_a_reply_the_worker_sends_is_what_the_scorer_reads():
    rfd, wfd = os.pipe()
    try:
        reply = [("ok", "ABC", ""), ("exception", None, "ValueError: x")]
        W.write_all(wfd, W.encode_message(reply))
        assert _pipe_worker(-1, rfd).receive(5.0) == reply
        W.write_all(wfd, W.encode_message(reply))
        with pytest.raises(S.SandboxError, match="more than 10"):  # the scorer's cap, before reading
            _pipe_worker(-1, rfd).receive(5.0, max_bytes=10)
    finally:
        os.close(rfd)
        os.close(wfd)


def _read_frames(data: bytes, n_expected: int, max_output: int = 10, pid: int = 4242) -> list:
    units = [(None, [("f", ())] * n_expected, False)]
    rfd, wfd = os.pipe()
    zygote_r, zygote_w = os.pipe()  # the zygote's reports: none come
    request_r, request_w = os.pipe()
    worker = SimpleNamespace(limits={"max_output": max_output}, _unit_of=W.Worker._unit_of, res_r=rfd,
                             status_r=zygote_r, req_w=request_w, child_pid=pid, in_fresh=False)
    try:
        os.write(wfd, data)
        os.close(wfd)
        wfd = -1
        out: list = []
        W.Worker._frames(worker, units, n_expected, 5.0, out, set(), time.monotonic() + 5.0, b"")
        return out
    finally:
        for fd in (rfd, wfd, zygote_r, zygote_w, request_r, request_w):
            if fd >= 0:
                os.close(fd)


def test_frames_the_child_writes_are_what_the_worker_reads():
    data = (W.encode_frame("loaded", 4242, "0") + W.encode_frame("ok", 4242, "héllo")
            + W.encode_frame("ok", 999, "forged by another pid") + W.encode_frame("exception", 4242, "E" * 700)
            + W.encode_frame("ok", 4242, "x" * 201) + W.encode_frame("ok", 4242, "past the last call"))
    assert _read_frames(data, 3, max_output=200) == [("ok", "héllo", ""), ("exception", None, "E" * W.DETAIL_CAP),
                                                     ("output_too_large", None, "201 characters > 200")]


def test_a_frame_past_the_cap_is_malformed():
    big = W.FRAME_HEADER.pack(1, 4242, W.frame_cap(10) + 1) + b"x" * (W.frame_cap(10) + 1)
    assert _read_frames(big, 1) == [("output_too_large", None, "malformed result frame")]
    at_cap = W.FRAME_HEADER.pack(5, 4242, W.frame_cap(10)) + b"e" * W.frame_cap(10)
    assert _read_frames(at_cap, 1) == [("exception", None, "e" * W.frame_cap(10))]


def test_the_argv_the_scorer_builds_is_what_the_worker_reads():
    with pytest.warns(S.WeakSandboxWarning):  # no namespaces: below full, as asked
        box = S.Sandbox(workers=1, memory_mb=300, fsize_bytes=12345, nofile=50, nproc=6, max_output=777, work_mb=3,
                        work_inodes=99, namespaces=False, allow_weak_sandbox=True)
    with box:
        argv = box._argv[4:]
        assert dict(zip(W.LIMIT_ARGS, map(int, argv))) == {
            "as_bytes": 300 << 20, "fsize_bytes": 12345, "nofile": 50, "nproc": 6, "max_output": 777,
            "work_bytes": 3 << 20, "work_inodes": 99}
        assert argv[len(W.LIMIT_ARGS):] == ["0"]
        # The worker read them back: its hello reports the limits it was given, every mechanism.
        assert box.isolation["nproc"] == 6 and box.isolation["work_bytes"] == 3 << 20
        assert set(W.MECHANISMS) <= set(box.isolation)
        (r,) = box.run([S.Job("def f(x):\n    return x * 800\n", "f", ("a",))])
        assert (r.status, r.detail) == ("output_too_large", "800 characters > 777")
