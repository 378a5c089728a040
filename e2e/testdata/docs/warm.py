import os, time
import numpy                                   # the slow part, done once
open(os.environ["AIRLOCK_READY_FILE"], "w").close()
while True:
    time.sleep(3600)                           # or wait for a job: see below
