#!/bin/sh
# Removes what a real node (crates/testenv/src/node) leaves on the machine when its processes are
# gone: the pods' containers, the mounts under its directories, the veths on its bridge, the
# bridge, kube-proxy's iptables rules and the directories themselves. Run with the node's lock
# held: at a node's start (an earlier run may have been killed), at its end, and by the reaper
# after the process that ran it has exited.
#
#   cleanup.sh STATE_DIR RUN_DIR BRIDGE KUBE_PROXY
state=$1 run=$2 bridge=$3 proxy=$4

# The containers: every process in the pods' cgroups (cgroupfs driver, cgroup v1 or v2), then
# the shims of this node's containerd. Twice, as a container may fork while it is killed.
for round in 1 2; do
  for d in /sys/fs/cgroup/pids/kubepods /sys/fs/cgroup/memory/kubepods /sys/fs/cgroup/kubepods; do
    [ -d "$d" ] && find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -9 2>/dev/null
  done
  for p in /proc/[0-9]*; do
    cmd=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null) || continue
    case $cmd in
      *containerd-shim*"-address $run/"*) kill -9 "${p#/proc/}" 2>/dev/null ;;
    esac
  done
  sleep 0.2
done

# Mounts (overlay snapshots, sandbox shm, secret volumes), deepest first.
awk -v s="$state" -v r="$run" '$5 == s || index($5, s "/") == 1 || $5 == r || index($5, r "/") == 1 { print $5 }' \
  /proc/self/mountinfo | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done

# The pods' veths (each takes its peer in the pod's network namespace with it), the bridge.
if ip link show "$bridge" >/dev/null 2>&1; then
  for veth in $(ip -o link show master "$bridge" 2>/dev/null | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }'); do
    ip link delete "$veth" 2>/dev/null
  done
  ip link delete "$bridge" 2>/dev/null
fi

# kube-proxy's chains and rules, then the kubelet's own (its canary, and the firewall that
# keeps other hosts off loopback).
[ -x "$proxy" ] && "$proxy" --cleanup >/dev/null 2>&1
for ipt in iptables ip6tables; do
  command -v "$ipt" >/dev/null || continue
  for t in filter nat mangle; do
    "$ipt" -t "$t" -S 2>/dev/null | grep -E '^-A .* -j KUBE-(FIREWALL|KUBELET-CANARY)( |$)' |
      sed 's/^-A/-D/' | while read -r rule; do eval "\"$ipt\" -t $t $rule" 2>/dev/null; done
    for c in KUBE-FIREWALL KUBE-KUBELET-CANARY KUBE-IPTABLES-HINT; do
      "$ipt" -t "$t" -F "$c" 2>/dev/null && "$ipt" -t "$t" -X "$c" 2>/dev/null
    done
  done
done

rm -rf "$state" "$run"
exit 0
