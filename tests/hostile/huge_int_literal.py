# expect: wrong_output
# generate: program() below builds the response; tests/test_hostile.py calls it
# An int literal over 4,300 decimal digits (written in hex) in a recalled operator: ast.dump of the
# static path raised ValueError out of grade(). It is graded (the sandbox runs it) like any program.
def program():
    return ("def func_9(s):\n    return 0x" + "f" * 4_000 + "\n\n"
            "def main_solution(x):\n    return x\n")
