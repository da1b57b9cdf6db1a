# expect: timeout
import _thread


def spin():
    while True:
        pass


def main_solution(x):
    for _ in range(4):
        _thread.start_new_thread(spin, ())
    while True:
        pass
