# expect: wrong_output
import builtins

builtins.isinstance = lambda *a: True
builtins.len = lambda *a: 0
builtins.str = lambda *a: "forged"

def main_solution(x):
    return "forged"
