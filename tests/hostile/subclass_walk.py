# expect: wrong_output exception
def main_solution(x):
    # The classic escape: from object's subclasses to a class whose functions' globals hold os.
    for cls in ().__class__.__base__.__subclasses__():
        init = getattr(cls, "__init__", None)
        space = getattr(init, "__globals__", None)
        if isinstance(space, dict) and "system" in space:
            space["system"]("echo escaped > /tmp/opgen-subclass-walk")
            return space["listdir"]("/")[0]
    return x
