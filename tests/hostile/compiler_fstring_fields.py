# expect: timeout
# generate: program() below builds the response; tests/test_hostile.py calls it
# 90,000 f-string fields in one literal: ~60 s in CPython 3.11's compiler.
def program():
    return "def main_solution(x):\n    return f'" + "{x}" * 90_000 + "'\n"
