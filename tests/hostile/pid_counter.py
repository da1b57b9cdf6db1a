# expect: wrong_output exception timeout
import os


def main_solution(x):
    # Moves the pid counter by an amount the next response can read back (a few bits across).
    for _ in range(23):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    return str(os.getpid())
