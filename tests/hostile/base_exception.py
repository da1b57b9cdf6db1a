# expect: exception
class Escape(BaseException):
    pass

def main_solution(x):
    raise Escape("not an Exception, so a careless except Exception misses it")
