# expect: wrong_output
# Python reads this whole line as one comment; str.splitlines() breaks it at '\x0b'.
def main_solution(x):
    return 'wrong'
# the answer:def main_solution(x): return 'abehilost'
