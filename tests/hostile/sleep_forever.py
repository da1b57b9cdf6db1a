# expect: timeout
import time


def main_solution(x):
    time.sleep(3600)
