# expect: wrong_output
class Liar(str):
    def __eq__(self, other):
        return True

    def __len__(self):
        return 0

    def __str__(self):
        return "anything"

def main_solution(x):
    return Liar("wrong")
