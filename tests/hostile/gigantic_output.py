# expect: output_too_large
def main_solution(x):
    return x * 10 ** 7
