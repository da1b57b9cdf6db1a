# expect: killed
import os


def main_solution(x):
    os.closerange(0, 4096)
    return x
