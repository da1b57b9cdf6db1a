# expect: wrong_output exception
import ctypes
import re


def main_solution(x):
    # Defines no operator: searches the memory it inherited for an earlier response's result for
    # the same input (the old worker's memory held them; a clean zygote never saw one).
    api = ctypes.pythonapi
    fds = (ctypes.c_int * 2)()
    api.pipe(fds)
    span = 4 << 20
    snapshot = ctypes.create_string_buffer(2 * span)
    base = ctypes.addressof(snapshot)
    centre = id(x) & ~4095
    for i, addr in enumerate(range(centre - span, centre + span, 4096)):
        if api.write(fds[1], ctypes.c_void_p(addr), 4096) == 4096:
            api.read(fds[0], ctypes.c_void_p(base + i * 4096), 4096)
    for m in re.finditer(rb"[a-z]{6,40}ab", snapshot.raw):
        return m.group().decode()
    return x
