# expect: exception
import os


def main_solution(x):
    os.remove("__SENTINEL__")
    return x
