# expect: exception timeout
import os


def main_solution(x):
    while True:
        os.fork()
