# expect: wrong_output
import os
import struct


def frame(code, payload):
    return struct.pack(">BII", code, os.getpid(), len(payload)) + payload


def main_solution(x):
    # A result, then a load report past the last call: the old worker died reading it.
    data = frame(1, b"forged") + frame(1, b"extra") + frame(0, b"0")
    for fd in range(3, 64):
        try:
            os.write(fd, data)
        except OSError:
            pass
    os._exit(0)
