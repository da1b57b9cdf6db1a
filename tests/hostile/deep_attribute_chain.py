# expect: syntax memory killed exception wrong_output
# generate: program() below builds the response; tests/test_hostile.py calls it
# A 59,000-deep `x.a.a...` overflowed the C stack of a compiler running under a raised recursion
# limit (the static path raised it process-wide): the scorer died of SIGSEGV. Now it is one grade.
def program():
    return "def main_solution(x):\n    return x" + ".a" * 59_000 + "\n"
