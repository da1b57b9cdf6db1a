# expect: too_large
# generate: program() below builds the response (over the 1,000,000-character cap); tests/test_hostile.py calls it
def program():
    return "def main_solution(x):\n    return x\n" + "#" * 1_000_001 + "\n"
