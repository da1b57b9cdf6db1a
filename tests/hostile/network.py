# expect: exception
import socket


def main_solution(x):
    socket.create_connection(("pypi.org", 443), timeout=1)
    return x
