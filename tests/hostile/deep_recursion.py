# expect: exception
def main_solution(x):
    def down(n):
        return down(n + 1) + "a"
    return down(0)
