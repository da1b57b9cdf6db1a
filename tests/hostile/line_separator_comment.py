# expect: wrong_output
# Python reads this whole line as one comment; str.splitlines() breaks it at '\u2028'.
def main_solution(x):
    return 'wrong'
# the answer: def main_solution(x): return 'abehilost'
