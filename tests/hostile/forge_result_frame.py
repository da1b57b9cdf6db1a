# expect: wrong_output killed
import os
import struct


def main_solution(x):
    data = b"forged"
    frame = struct.pack(">BII", 1, os.getpid(), len(data)) + data
    for fd in range(3, 64):
        try:
            os.write(fd, frame)
        except OSError:
            pass
    return "also wrong"
