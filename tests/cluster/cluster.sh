#!/usr/bin/env bash
# tests/cluster/cluster.sh — R hosts on one machine from Linux network
# namespaces, and one command run across them.
#
#   tests/cluster/cluster.sh [--hosts R] [--ranks K] [--rate RATE [--burst B]] [--mtu M] [-q]
#                            -- COMMAND...
#     --hosts R: hosts (1..64, default 2); --ranks K: ranks, mpirun's slots, per host
#     (1..64, default 2);
#     --rate: a tc rate (500mbit, 2gbit); --burst: its bucket (default 256kb);
#     --mtu: the links' MTU (576..65535, default 1500); -q: no progress lines
#   tests/cluster/cluster.sh --check            can this machine run it? (exit 0/2)
#   tests/cluster/cluster.sh --clean-stale      remove what killed runs left behind
#   tests/cluster/cluster.sh --validate [--hosts R] [--ranks K] [--rate RATE]
#                                               check the flags only (exit 0/2)
#
# Layout of one run (ID = dmc-<driver pid>-<4 random hex digits>, unique per run):
#   namespace ID-sw      the switch: bridge br0 and one port pI per host
#   namespace ID-nI      host I (1..R): eth0 = 198.18.0.I/24, own hostname ID-nI
#                        (unshare --uts), loopback up
#   namespace ID-head    where COMMAND runs: eth0 = 198.18.0.254/24, hostname ID-head
# Every address is inside 198.18.0.0/15 (reserved for benchmarking, RFC 2544)
# and lives only inside the run's namespaces; nothing is added to the root
# namespace, so deleting the namespaces removes every link with them.
# --rate puts a token-bucket (tbf) limit on both directions of each host's
# link (host eth0 egress and its switch port's egress); netem is not used.
#
# COMMAND runs in the head namespace with this environment:
#   DMUON_CLUSTER_ID      the run's ID
#   DMUON_CLUSTER_HOSTS   "ID-n1:K,ID-n2:K,…" for mpirun --host
#   DMUON_CLUSTER_NP      R·K
#   DMUON_CLUSTER_AGENT   the rsh agent (rsh-agent.sh beside this script)
#   OMPI_MCA_plm_rsh_agent, OMPI_MCA_plm_rsh_no_tree_spawn=1,
#   OMPI_MCA_btl=self,vader,tcp, OMPI_MCA_btl_tcp_if_include and
#   OMPI_MCA_oob_tcp_if_include = 198.18.0.0/24,
#   OMPI_MCA_mpi_yield_when_idle=1 and OMPI_MCA_hwloc_base_binding_policy=none
#   (all hosts share this machine's cores; values already set are kept),
#   OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# so "mpirun -np $DMUON_CLUSTER_NP --host $DMUON_CLUSTER_HOSTS prog" starts an
# Open MPI daemon in every host namespace through the agent: ranks of one host
# share memory (vader), ranks of different hosts talk TCP over the bridge,
# and MPI_COMM_TYPE_SHARED finds one node per host.
#
# Invariant: on exit — normal, error, or SIGINT/SIGTERM/SIGHUP — every process
# in the run's namespaces is killed and every namespace deleted (their veth
# links go with them); the exit status is COMMAND's (130/143/129 on a
# signal, 2 on bad usage or a machine that cannot run it, 3 on a set-up
# failure).  Only a SIGKILL of the driver itself can leave a run behind;
# --clean-stale removes runs whose driver process is gone.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
prog=cluster.sh
PREFIX=dmc
NET=198.18.0
NET_CIDR=198.18.0.0/24

die_usage() { echo "$prog: error: $*" >&2; exit 2; }
usage() {
    sed -n '2,/^set -u/p' "${BASH_SOURCE[0]}" | sed -e '/^set -u/d' -e 's/^# \{0,1\}//'
}

# Says why this machine cannot run the harness, or nothing.
why_not() {
    if [ "$(id -u)" -ne 0 ]; then
        echo "needs root (network namespaces, veth, bridge, tc); run as root or skip the cluster tests"
        return
    fi
    local t
    for t in ip unshare nsenter tc mpirun; do
        command -v "$t" > /dev/null 2>&1 || { echo "needs '$t' (make deps installs iproute2, util-linux, openmpi-bin)"; return; }
    done
    local probe="$PREFIX-probe-$$"
    if ! ip netns add "$probe" 2> /dev/null; then
        echo "cannot create a network namespace here ('ip netns add' failed: no CAP_SYS_ADMIN, or namespaces are disabled)"
        return
    fi
    if ! ip netns exec "$probe" unshare --uts true 2> /dev/null; then
        ip netns del "$probe" 2> /dev/null
        echo "cannot create a UTS namespace ('unshare --uts' failed)"
        return
    fi
    if ! ip -n "$probe" link add vprobe0 type veth peer name vprobe1 2> /dev/null ||
       ! ip -n "$probe" link add brprobe type bridge 2> /dev/null; then
        ip netns del "$probe" 2> /dev/null
        echo "cannot create veth or bridge links (kernel modules veth/bridge missing?)"
        return
    fi
    ip netns del "$probe" 2> /dev/null
}

# Kills every process in namespace $1 (TERM, then KILL after a grace period).
kill_ns() {
    local ns=$1 pids i
    pids=$(ip netns pids "$ns" 2> /dev/null)
    [ -n "$pids" ] || return 0
    kill -TERM $pids 2> /dev/null
    for i in 1 2 3 4 5 6 7 8 9 10; do
        pids=$(ip netns pids "$ns" 2> /dev/null)
        [ -n "$pids" ] || return 0
        sleep 0.2
    done
    kill -KILL $pids 2> /dev/null
    for i in 1 2 3 4 5 6 7 8 9 10; do
        [ -n "$(ip netns pids "$ns" 2> /dev/null)" ] || return 0
        sleep 0.1
    done
}

# Removes every namespace whose name starts with $1- (processes first).
remove_run() {
    local id=$1 ns
    for ns in $(ip netns list 2> /dev/null | awk '{print $1}' | grep -E "^$id-"); do
        kill_ns "$ns"
    done
    for ns in $(ip netns list 2> /dev/null | awk '{print $1}' | grep -E "^$id-"); do
        ip netns del "$ns" 2> /dev/null || echo "$prog: warning: could not delete namespace $ns" >&2
    done
}

case "${1:-}" in
--check)
    why=$(why_not)
    if [ -n "$why" ]; then echo "$prog: $why" >&2; exit 2; fi
    echo "$prog: this machine can run the cluster harness"
    exit 0 ;;
--clean-stale)
    [ "$(id -u)" -eq 0 ] || die_usage "--clean-stale needs root"
    for id in $(ip netns list 2> /dev/null | awk '{print $1}' | sed -nE "s/^($PREFIX-[0-9]+-[0-9a-f]{4})-.*/\1/p" | sort -u); do
        pid=${id#"$PREFIX"-}; pid=${pid%-*}
        if ! kill -0 "$pid" 2> /dev/null; then
            echo "$prog: removing $id (its driver, pid $pid, is gone)"
            remove_run "$id"
        fi
    done
    # the machine check's probe namespace, when a signal came between its add and its del
    for ns in $(ip netns list 2> /dev/null | awk '{print $1}' | grep -E "^$PREFIX-probe-[0-9]+$"); do
        pid=${ns##*-}
        if ! kill -0 "$pid" 2> /dev/null; then
            echo "$prog: removing $ns (its driver, pid $pid, is gone)"
            ip netns del "$ns" 2> /dev/null || echo "$prog: warning: could not delete namespace $ns" >&2
        fi
    done
    exit 0 ;;
-h|--help) usage; exit 0 ;;
esac

R=2; K=2; RATE=""; BURST=""; MTU=1500; QUIET=0; VALIDATE=0
while [ $# -gt 0 ]; do
    case "$1" in
    --hosts|--ranks|--rate|--burst|--mtu)
        [ $# -ge 2 ] || die_usage "$1 needs a value"
        [[ "$2" != -* ]] || die_usage "$1 needs a value (got the option '$2')"
        case "$1" in
        --hosts) R=$2 ;; --ranks) K=$2 ;; --rate) RATE=$2 ;; --burst) BURST=$2 ;; --mtu) MTU=$2 ;;
        esac
        shift 2 ;;
    -q|--quiet) QUIET=1; shift ;;
    --validate) VALIDATE=1; shift ;;
    --check|--clean-stale|-h|--help) die_usage "$1 goes first and alone (see --help)" ;;
    --) shift; break ;;
    *) die_usage "unknown option '$1' (see --help)" ;;
    esac
done
# decimal without leading zeros (bash would read 010 as octal), at most 5 digits
[[ "$R" =~ ^[1-9][0-9]{0,4}$ ]] && [ "$R" -le 64 ] || die_usage "--hosts '$R': expected an integer in 1..64"
[[ "$K" =~ ^[1-9][0-9]{0,4}$ ]] && [ "$K" -le 64 ] || die_usage "--ranks '$K': expected an integer in 1..64"
[[ "$MTU" =~ ^[1-9][0-9]{0,4}$ ]] && [ "$MTU" -ge 576 ] && [ "$MTU" -le 65535 ] || die_usage "--mtu '$MTU': expected an integer in 576..65535"
# a positive rate of at most 9 digits before the point (tc takes up to 2^64 bit/s)
[ -z "$RATE" ] || { [[ "$RATE" =~ ^([0-9]{1,9})(\.[0-9]{1,6})?([kmgt]?bit|[kmgt]?bps)$ ]] &&
    [[ "$RATE" =~ [1-9] ]]; } || die_usage "--rate '$RATE': expected a positive tc rate such as 500mbit or 2gbit"
[ -z "$BURST" ] || [ -n "$RATE" ] || die_usage "--burst goes with --rate"
[ -z "$BURST" ] || [[ "$BURST" =~ ^[1-9][0-9]{0,8}[kmg]?b?$ ]] || die_usage "--burst '$BURST': expected a size such as 256kb"
[ "$VALIDATE" = 0 ] || exit 0
[ $# -gt 0 ] || die_usage "no command given (usage: $prog [--hosts R] [--ranks K] [--rate RATE] -- COMMAND...)"
why=$(why_not)
[ -z "$why" ] || { echo "$prog: $why" >&2; exit 2; }

ID=$PREFIX-$$-$(od -An -N2 -tx1 /dev/urandom | tr -d ' \n')
say() { [ "$QUIET" = 1 ] || echo "$prog: $*" >&2; }
child=""
cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP
    [ -n "$child" ] && kill -TERM "$child" 2> /dev/null
    remove_run "$ID"
    if ip netns list 2> /dev/null | grep -qE "^$ID-"; then
        echo "$prog: error: namespaces of $ID remain: $(ip netns list | grep -E "^$ID-" | tr '\n' ' ')" >&2
        [ "$rc" -ne 0 ] || rc=3
    else
        say "$ID removed"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

fail_setup() { echo "$prog: error: setting up $ID: $*" >&2; exit 3; }

SW=$ID-sw
HEAD=$ID-head
ip netns add "$SW" || fail_setup "ip netns add $SW"
ip -n "$SW" link set lo up || fail_setup "loopback of $SW"
ip -n "$SW" link add br0 type bridge || fail_setup "bridge in $SW"
ip -n "$SW" link set br0 mtu "$MTU" up || fail_setup "bridge up"

# add_host NS ADDRESS PORT: a namespace with eth0 on the switch's port PORT
add_host() {
    local ns=$1 addr=$2 port=$3 burst=${BURST:-256kb}
    ip netns add "$ns" || fail_setup "ip netns add $ns"
    ip -n "$SW" link add "$port" mtu "$MTU" type veth peer name eth0 netns "$ns" ||
        fail_setup "veth $port for $ns"
    ip -n "$SW" link set "$port" master br0 up || fail_setup "port $port up"
    ip -n "$ns" link set lo up || fail_setup "loopback of $ns"
    ip -n "$ns" addr add "$addr/24" dev eth0 || fail_setup "address $addr in $ns"
    ip -n "$ns" link set eth0 up || fail_setup "eth0 of $ns up"
    if [ -n "$RATE" ]; then
        ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$RATE" burst "$burst" latency 100ms ||
            fail_setup "tc rate $RATE on $ns"
        ip netns exec "$SW" tc qdisc add dev "$port" root tbf rate "$RATE" burst "$burst" latency 100ms ||
            fail_setup "tc rate $RATE on port $port"
    fi
}
hosts=""
for i in $(seq 1 "$R"); do
    add_host "$ID-n$i" "$NET.$i" "p$i"
    hosts="$hosts${hosts:+,}$ID-n$i:$K"
done
add_host "$HEAD" "$NET.254" phead
# The head has no rate limit of its own: it only carries the launch traffic.
if [ -n "$RATE" ]; then
    ip netns exec "$HEAD" tc qdisc del dev eth0 root 2> /dev/null
    ip netns exec "$SW" tc qdisc del dev phead root 2> /dev/null
fi
# Every link must be up (both veth ends and the bridge) before anything starts.
for ns in $(seq 1 "$R" | sed "s/^/$ID-n/") "$HEAD"; do
    for t in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
        [ "$(ip netns exec "$ns" cat /sys/class/net/eth0/operstate 2> /dev/null)" = up ] && break
        sleep 0.1
    done
    [ "$(ip netns exec "$ns" cat /sys/class/net/eth0/operstate 2> /dev/null)" = up ] ||
        fail_setup "eth0 of $ns did not come up"
done
say "$ID: $R hosts x $K ranks on $NET_CIDR${RATE:+, $RATE per host link}"

export DMUON_CLUSTER_ID=$ID DMUON_CLUSTER_HOSTS=$hosts DMUON_CLUSTER_NP=$((R * K))
export DMUON_CLUSTER_AGENT=$here/rsh-agent.sh
export OMPI_MCA_plm_rsh_agent=$here/rsh-agent.sh
export OMPI_MCA_plm_rsh_no_tree_spawn=1
export OMPI_MCA_btl=self,vader,tcp
export OMPI_MCA_btl_tcp_if_include=$NET_CIDR OMPI_MCA_oob_tcp_if_include=$NET_CIDR
# Every host is this machine's cores: Open MPI sees K slots per host and
# would bind ranks of different hosts to the same core and let idle ones
# spin; a value already set is kept.
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
export OMPI_MCA_hwloc_base_binding_policy=${OMPI_MCA_hwloc_base_binding_policy:-none}
# the driver runs as root (namespaces), so mpirun does too
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ip netns exec "$HEAD" unshare --uts -- /bin/sh -c 'hostname "$0" && exec "$@"' "$HEAD" "$@" &
child=$!
wait "$child"
rc=$?
child=""
exit "$rc"
