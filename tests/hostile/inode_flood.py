# expect: wrong_output
import os


def main_solution(x):
    # Empty files cost no bytes, so a byte cap alone does not stop them.
    n = 0
    try:
        while n < 50000:
            os.close(os.open(f"f{n}", os.O_CREAT | os.O_WRONLY))
            n += 1
    except OSError:
        pass
    # Not a string when nothing capped the files: the old sandbox lands in not_a_string.
    return n if n == 50000 else f"files {n}"
