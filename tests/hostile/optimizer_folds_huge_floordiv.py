# expect: timeout
# generate: program() below builds the response (~900 KB); tests/test_hostile.py calls it
# The AST optimizer folds a constant `//` of two huge integers with no size guard (quadratic division).
def program():
    return ("def main_solution(x):\n    return str(0x" + "f" * 600_000 + " // 0x" + "e" * 300_000 + ")\n")
