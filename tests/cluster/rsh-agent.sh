#!/bin/sh
# tests/cluster/rsh-agent.sh — Open MPI's rsh agent for the namespace cluster
# (cluster.sh): "rsh-agent.sh [ssh-style options] HOST COMMAND..." runs
# COMMAND, as one shell command line like ssh does, inside the network
# namespace named HOST under a fresh UTS namespace whose hostname is HOST.
# Only the run's own host namespaces are accepted (dmc-<pid>-<hex>-nI); the
# environment is inherited (Open MPI's variables reach the daemon as they
# would through ssh's SendEnv).
while [ $# -gt 0 ]; do
    case "$1" in
    -l|-p|-o|-i) shift 2 ;;
    -*) shift ;;
    *) break ;;
    esac
done
host=${1:-}
[ $# -ge 2 ] || { echo "rsh-agent.sh: usage: rsh-agent.sh HOST COMMAND..." >&2; exit 255; }
shift
case "$host" in
dmc-[0-9]*-[0-9a-f]*-n[0-9]*) ;;
*) echo "rsh-agent.sh: '$host' is not a host of a cluster.sh run" >&2; exit 255 ;;
esac
ip netns list 2> /dev/null | awk '{print $1}' | grep -qx "$host" ||
    { echo "rsh-agent.sh: no namespace '$host' (is its cluster.sh run still alive?)" >&2; exit 255; }
exec ip netns exec "$host" unshare --uts -- /bin/sh -c 'hostname "$0" && exec /bin/sh -c "$1"' "$host" "$*"
