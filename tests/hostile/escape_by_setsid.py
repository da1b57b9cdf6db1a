# expect: wrong_output
import os
import time


def main_solution(x):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(1)
            with open("__SENTINEL__", "w") as fh:
                fh.write("pwned later")
        os._exit(0)
    return "detached"
