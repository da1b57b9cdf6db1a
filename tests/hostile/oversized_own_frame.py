# expect: output_too_large
import os
import struct


def main_solution(x):
    # A result frame written by the program itself, over the output cap (100,000 characters) but
    # under the old worker's byte limit for a frame: the cap lived in the child's own code.
    data = b"a" * 300000
    frame = struct.pack(">BII", 1, os.getpid(), len(data)) + data
    for fd in range(3, 64):
        try:
            os.write(fd, frame)
        except OSError:
            pass
    os._exit(0)
