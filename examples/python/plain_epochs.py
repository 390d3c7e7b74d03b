"""A script of one's own that prints one line per epoch and nothing else, as many do: `epoch 3/26 loss
0.0756`. It serves no endpoint and imports nothing of the operator; the operator's supervisor reads the
lines. --copy writes what it printed to a file too (the tests compare it with the log).
"""

import argparse
import sys
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=26)
    p.add_argument("--epoch-seconds", type=float, default=30.0)
    p.add_argument("--copy", default="")
    a = p.parse_args()
    copy = open(a.copy, "w") if a.copy else None
    loss = 0.9
    for epoch in range(1, a.epochs + 1):
        time.sleep(a.epoch_seconds)  # the epoch's work
        loss *= 0.85
        line = f"epoch {epoch}/{a.epochs} loss {loss:.4f}\n"
        sys.stdout.write(line)
        sys.stdout.flush()
        if copy:
            copy.write(line)
            copy.flush()


if __name__ == "__main__":
    main()
