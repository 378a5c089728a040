# A worker that counts, for pause and resume: its counter goes on from
# where it stopped.
import time

n = 0
while True:
    n += 1
    with open("/tmp/count", "w") as f:
        f.write(str(n))
    time.sleep(0.1)
