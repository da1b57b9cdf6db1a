# expect: timeout
while True:
    pass

def main_solution(x):
    return x
