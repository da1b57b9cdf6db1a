# expect: memory
def main_solution(x):
    return "a" * (10 ** 11)
