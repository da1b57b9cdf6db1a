# expect: exception
def main_solution(x):
    with open("__SENTINEL__", "w") as fh:
        fh.write("pwned")
    return x
