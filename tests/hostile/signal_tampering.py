# expect: timeout
import signal


def main_solution(x):
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM, signal.SIGXCPU, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    while True:
        pass
