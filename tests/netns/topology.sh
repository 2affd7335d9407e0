#!/usr/bin/env bash
# Hosts on one switch, made of network namespaces: each host is a namespace TAG-HOST with one interface eth0,
# wired by a veth pair to a port named HOST on a bridge inside the switch namespace TAG-sw. Every link is
# shaped in both directions with `tc ... tbf` (this kernel has tbf, not netem). Nothing is created in the
# root namespace, so parallel runs with different TAGs cannot clash (subnets included) and deleting the
# namespaces removes everything.
#
#   topology.sh up TAG RATE HOST=IP/PREFIX...   e.g. up baton-123 1gbit c=10.99.0.10/24 s0=10.99.0.11/24
#   topology.sh down TAG                        deletes every namespace TAG-*
#   topology.sh reap PREFIX                     deletes PREFIX<pid>-* namespaces whose <pid> is no longer alive
#                                               (left by a run killed with SIGKILL, e.g. a ctest timeout)
# Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2.
set -euo pipefail

up() {
  local tag=$1 rate=$2
  shift 2
  ip netns add "$tag-sw"
  ip -n "$tag-sw" link add br0 type bridge
  ip -n "$tag-sw" link set br0 up
  local spec host addr
  for spec in "$@"; do
    host=${spec%%=*} addr=${spec#*=}
    ip netns add "$tag-$host"
    ip link add "$host" netns "$tag-sw" type veth peer name eth0 netns "$tag-$host"
    ip -n "$tag-sw" link set "$host" master br0 up
    ip -n "$tag-$host" addr add "$addr" dev eth0
    ip -n "$tag-$host" link set eth0 up
    ip -n "$tag-$host" link set lo up
    # burst: a few ms of line rate, as a switch port buffers; latency bounds the queue.
    ip netns exec "$tag-sw" tc qdisc add dev "$host" root tbf rate "$rate" burst 256kb latency 100ms
    ip netns exec "$tag-$host" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 100ms
  done
}

down() {
  local ns
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$1-" || true); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
}

reap() {
  local ns pid
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$1[0-9]+-" || true); do
    pid=${ns#"$1"}
    pid=${pid%%-*}
    kill -0 "$pid" 2>/dev/null || down "$1$pid"
  done
}

case ${1:-} in
  up) shift; up "$@" ;;
  down) down "$2" ;;
  reap) reap "$2" ;;
  *) echo "usage: $0 up TAG RATE HOST=IP/PREFIX... | down TAG | reap PREFIX" >&2; exit 2 ;;
esac
