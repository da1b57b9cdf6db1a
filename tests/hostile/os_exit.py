# expect: killed
import os


def main_solution(x):
    os._exit(0)
