# expect: timeout
# generate: program() below builds the response (~1 MB of plain statements); tests/test_hostile.py calls it
# One megabyte of module-level statements: parsing, compiling and the structure walk of all of it.
def program():
    return "def main_solution(x):\n    return x\n" + "y = [x for x in 'ab' if x]\n" * 35_000
