# expect: timeout
def main_solution(x):
    while True:
        print(x * 1000)
