# expect: exception
import os
import signal


def main_solution(x):
    os.kill(-1, signal.SIGKILL)
    return x
