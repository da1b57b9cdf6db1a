# expect: exception
def main_solution(x):
    with open("junk", "wb") as fh:
        for _ in range(1000):
            fh.write(b"0" * 2 ** 20)
    return x
