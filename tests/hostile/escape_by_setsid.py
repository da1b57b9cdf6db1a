# expect: wrong_output
import os
import time


def main_solution(x):
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            # Returning only once the escapee is out of the child's process group: otherwise the
            # group kill after the result can win the race and the escape is never tried.
            os.write(w, b"1")
            time.sleep(1)
            with open("__SENTINEL__", "w") as fh:
                fh.write("pwned later")
        os._exit(0)
    os.read(r, 1)
    return "detached"
