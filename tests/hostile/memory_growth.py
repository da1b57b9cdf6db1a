# expect: memory
def main_solution(x):
    hoard = []
    while True:
        hoard.append(bytes(2 ** 27))
