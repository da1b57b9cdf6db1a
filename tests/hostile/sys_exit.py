# expect: exception
import sys


def main_solution(x):
    sys.exit(0)
