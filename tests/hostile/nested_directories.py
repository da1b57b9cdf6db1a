# expect: wrong_output
import os


def main_solution(x):
    # 1,200 nested directories: the old worker's cleanup (os.walk) died of RecursionError.
    made = 0
    try:
        for _ in range(1200):
            os.mkdir("a")
            os.chdir("a")
            made += 1
    except OSError:
        pass
    return f"made {made}"
