#!/bin/sh
# Usage: same-trace.sh FIRST_OUTPUT RUNS LATTICE_SIM_COMMAND...
# Runs the simulator command RUNS more times, each in a new process, and fails unless every
# run's last-line trace digest equals the one in FIRST_OUTPUT (the output of an earlier process
# of the same command). `--determinism` replays a seed inside one process, so a value that
# differs only between processes passes it: an address under address-space randomization that
# reaches a reply (ARCHITECTURE §91). Such a value often takes one of two forms, so one more
# process alone would catch it about half the time; each extra run halves the odds of a miss.
set -eu
first_file=$1
runs=$2
shift 2
first=$(tail -n 1 "$first_file" | grep -o 'trace=[0-9a-f]*' || true)
i=0
while [ "$i" -lt "$runs" ]; do
    i=$((i + 1))
    again=$("$@" | tail -n 1 | grep -o 'trace=[0-9a-f]*' || true)
    if [ -z "$first" ] || [ "$first" != "$again" ]; then
        echo "trace digest differs between processes of one command: ${first:-none} / ${again:-none} (run $i)" >&2
        echo "replay: $*   (in separate processes; compare the trace= digests)" >&2
        exit 1
    fi
done
echo "same trace in $runs more processes: $first"
