# expect: exception
import os


def main_solution(x):
    with open(f"/proc/{os.getppid()}/mem", "rb") as fh:
        return fh.read(100).decode()
