# expect: timeout
# generate: program() below builds the response (178 KB); tests/test_hostile.py calls it
# CPython 3.11's compiler is quadratic in the distinct keyword arguments of one call: 30,000 of them
# cost ~40 s of compilation. The grading process's budget ends it, not the caller's patience.
def program():
    keywords = ", ".join(f"k{i}=1" for i in range(30_000))
    return f"def main_solution(x):\n    return str(dict({keywords}))\n"
