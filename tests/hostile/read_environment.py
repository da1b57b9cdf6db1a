# expect: wrong_output
import os


def main_solution(x):
    return repr(dict(os.environ))
