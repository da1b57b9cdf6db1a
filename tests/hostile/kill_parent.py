# expect: exception wrong_output
import os
import signal


def main_solution(x):
    os.kill(os.getppid(), signal.SIGKILL)
    os.kill(1, signal.SIGKILL)
    return x
