# expect: exception
# func_3 recalled under a renamed parameter that captures the builtin its body calls: as an AST it
# is func_3 up to renaming, but not a consistent one (the new name is free in the body), so the
# static path's alpha-renamed recalls must decline; the child fails ('str' object is not callable).
def func_3(sorted):
    return ''.join(sorted(sorted))

def func_5(s, pre):
    return pre + s

def main_solution(x):
    return func_5(func_3(x), 'ab')
