# expect: wrong_output
import os

# A minimal static x86-64 ELF that exits 0 (the attack ran a static binary written to the
# work directory; with a noexec work area and execve refused, it cannot run).
ELF = bytes.fromhex(
    "7f454c46020101000000000000000000"
    "02003e00010000007800400000000000"
    "40000000000000000000000000000000"
    "00000000400038000100000000000000"
    "01000000050000000000000000000000"
    "00004000000000000000400000000000"
    "84000000000000008400000000000000"
    "0010000000000000"
    "b83c00000031ff0f05"
)


def main_solution(x):
    with open("prog", "wb") as fh:
        fh.write(ELF)
    os.chmod("prog", 0o755)
    pid = os.fork()
    if pid == 0:
        try:
            os.execv("./prog", ["prog"])
        except OSError:
            os._exit(7)
    _, status = os.waitpid(pid, 0)
    # Not a string when the binary ran: the old sandbox lands in not_a_string.
    return 42 if os.waitstatus_to_exitcode(status) == 0 else "refused"
