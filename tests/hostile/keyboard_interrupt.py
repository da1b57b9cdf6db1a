# expect: exception
def main_solution(x):
    raise KeyboardInterrupt
